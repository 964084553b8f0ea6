"""A tiny deterministic DOT writer.

Graphs are built statement by statement and printed in insertion order with attributes sorted by
key, so the same input always gives the same bytes (no timestamps, no ids drawn from memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field


class Html(str):
    """An HTML-like label; written between ``<`` and ``>`` instead of quotes."""


AttrValue = str | int | float
Attrs = dict[str, AttrValue]


def quote(text: str) -> str:
    """Quote ``text`` as a DOT string; a newline becomes a centred line break (``\\n``)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def html_escape(text: str) -> str:
    """Escape ``text`` for use inside an HTML-like label."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _value(v: AttrValue) -> str:
    if isinstance(v, Html):
        return f"<{v}>"
    if isinstance(v, bool):
        return quote("true" if v else "false")
    return quote(str(v))


def format_attrs(attrs: Attrs) -> str:
    """``[k1="v1", k2="v2"]`` with keys sorted, or an empty string when there are none."""
    if not attrs:
        return ""
    return " [" + ", ".join(f"{k}={_value(attrs[k])}" for k in sorted(attrs)) + "]"


@dataclass
class Graph:
    """A digraph or a (cluster) subgraph: graph/node/edge defaults plus statements in order."""

    name: str
    kind: str = "digraph"
    attrs: Attrs = field(default_factory=dict)
    node_attrs: Attrs = field(default_factory=dict)
    edge_attrs: Attrs = field(default_factory=dict)
    items: list[str | Graph] = field(default_factory=list)

    def node(self, node_id: str, **attrs: AttrValue) -> None:
        """Add a node statement."""
        self.items.append(f"{quote(node_id)}{format_attrs(attrs)};")

    def edge(self, tail: str, head: str, **attrs: AttrValue) -> None:
        """Add an edge statement ``tail -> head``."""
        self.items.append(f"{quote(tail)} -> {quote(head)}{format_attrs(attrs)};")

    def subgraph(self, name: str, **attrs: AttrValue) -> Graph:
        """Add and return a subgraph (a name starting ``cluster_`` draws a box around it)."""
        sub = Graph(name, "subgraph", dict(attrs))
        self.items.append(sub)
        return sub

    def lines(self, indent: str = "") -> list[str]:
        """The statement lines of this graph, indented by ``indent``."""
        inner = indent + "  "
        out = [f"{indent}{self.kind} {quote(self.name)} {{"]
        for key in sorted(self.attrs):
            out.append(f"{inner}{key}={_value(self.attrs[key])};")
        if self.node_attrs:
            out.append(f"{inner}node{format_attrs(self.node_attrs)};")
        if self.edge_attrs:
            out.append(f"{inner}edge{format_attrs(self.edge_attrs)};")
        for item in self.items:
            if isinstance(item, Graph):
                out.extend(item.lines(inner))
            else:
                out.append(inner + item)
        out.append(f"{indent}}}")
        return out

    def source(self) -> str:
        """The whole graph as DOT text, ending with a newline."""
        return "\n".join(self.lines()) + "\n"
