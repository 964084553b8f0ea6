"""Read back the edges and nodes of the DOT text the diagram writer produces (for the tests)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ATTR = re.compile(r'(\w+)=(?:"((?:[^"\\]|\\.)*)"|<(.*)>)')
_EDGE = re.compile(r'^\s*"((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)"(?: \[(.*)\])?;$')
_NODE = re.compile(r'^\s*"((?:[^"\\]|\\.)*)"(?: \[(.*)\])?;$')


def unescape(text: str) -> str:
    """Undo DOT string escaping: ``\\n`` -> newline, ``\\"`` -> ``"``, ``\\\\`` -> ``\\``."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def attrs(text: str | None) -> dict[str, str]:
    """Parse ``k="v", k2=<html>`` into a dict (values unescaped)."""
    out: dict[str, str] = {}
    for m in _ATTR.finditer(text or ""):
        out[m.group(1)] = unescape(m.group(2)) if m.group(2) is not None else m.group(3)
    return out


@dataclass(frozen=True)
class Edge:
    """One edge statement."""

    tail: str
    head: str
    attrs: dict[str, str]

    @property
    def label(self) -> str:
        return self.attrs.get("label", "")


def edges(dot: str) -> list[Edge]:
    """Every edge statement, in order."""
    out = []
    for line in dot.splitlines():
        m = _EDGE.match(line)
        if m:
            out.append(Edge(unescape(m.group(1)), unescape(m.group(2)), attrs(m.group(3))))
    return out


def nodes(dot: str) -> dict[str, dict[str, str]]:
    """Node id -> attributes, for every node statement."""
    out = {}
    for line in dot.splitlines():
        if " -> " in line:
            continue
        m = _NODE.match(line)
        if m:
            out[unescape(m.group(1))] = attrs(m.group(2))
    return out


def guard_part(label: str) -> str:
    """The ``event [guard]`` head of an edge label, its wrapped lines joined back with one space."""
    head = []
    for line in label.split("\n"):
        if line.startswith("/ ") or line.startswith("step"):
            break
        head.append(line)
    return " ".join(head)
