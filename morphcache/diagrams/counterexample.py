"""The diagram of a refuted property's counterexample.

Called by the proofs with::

    write_counterexample(spec: Spec, property_name: str, steps: Sequence[TraceStep],
                         out_dir: str | Path, svg: bool = True) -> list[Path]

It writes ``<spec>-cex-<property>.dot`` (and ``.svg`` when Graphviz ``dot`` is installed) into
``out_dir`` and returns the written paths.  The diagram has one cluster per object the trace touched,
showing that object's whole lifecycle with the traversed edges and visited states in bold red, each
edge tagged with its step numbers (and page), and the states every page ended in; plus a table node
listing the refuted property and every step: the event with its arguments and the state keys it
changed (``before -> after``).  The starting state (a first step whose event is None) is listed in
full.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from morphcache.spec.expr import render
from morphcache.spec.model import Property, Spec

from .dot import Graph, Html, html_escape
from .labels import wrap_and
from .lifecycle import FONT, fill_lifecycle, object_title
from .output import write_diagrams
from .trace import TraceStep, changed_keys, key_order, split_key, step_numbers, trace_highlights, where

TABLE_WIDTH = 72


def _find_property(spec: Spec, name: str) -> Property | None:
    return next((p for p in spec.properties if p.name == name), None)


def _show(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _call(spec: Spec, step: TraceStep) -> str:
    if step.event is None:
        return "start"
    order = {name: i for i, name in enumerate(_arg_names(spec, step.event))}
    args = sorted(step.args.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
    return f"{step.event}({', '.join(f'{k}={v}' for k, v in args)})"


def _arg_names(spec: Spec, event: str) -> tuple[str, ...]:
    try:
        return spec.event(event).arg_names
    except KeyError:
        return ()


def _pack(items: list[str], width: int = TABLE_WIDTH) -> list[str]:
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) <= width:
            lines[-1] += f"  {item}"
        else:
            lines.append(item)
    return lines


def _full_state(state: dict[str, object]) -> list[str]:
    groups: dict[str, list[str]] = {}
    for key in sorted(state, key=key_order):
        name, reader, page = split_key(key)
        groups.setdefault(where(reader, page), []).append(f"{name}={_show(state[key])}")
    lines: list[str] = []
    for at, items in groups.items():
        lead = f"{at}: " if at else ""
        packed = _pack(items, TABLE_WIDTH - len(lead))
        lines.extend([lead + packed[0], *(" " * len(lead) + rest for rest in packed[1:])])
    return lines


def _cell(lines: list[str], bold: bool = False, colspan: int = 1, bgcolor: str = "") -> str:
    body = "".join(f"{html_escape(line)}<BR ALIGN=\"LEFT\"/>" for line in lines) or " "
    if bold:
        body = f"<B>{body}</B>"
    span = f' COLSPAN="{colspan}"' if colspan > 1 else ""
    bg = f' BGCOLOR="{bgcolor}"' if bgcolor else ""
    return f'<TD ALIGN="LEFT" BALIGN="LEFT" VALIGN="TOP"{span}{bg}>{body}</TD>'


def _header(spec: Spec, name: str) -> list[str]:
    prop = _find_property(spec, name)
    if prop is None:
        return [f"<TR>{_cell([f'refuted: {name}'], bold=True, colspan=3)}</TR>"]
    title = f"refuted: {name}" + (f"  [{prop.rule}]" if prop.rule else "")
    lines = wrap_and(render(prop.expr), TABLE_WIDTH)
    if prop.kind == "step" and prop.event:
        lines.append(f"(must hold whenever {prop.event} fires)")
    rows = [_cell([title], bold=True, colspan=3, bgcolor="#ffe4e1"), _cell(lines, colspan=3)]
    if prop.description:
        rows.append(_cell([prop.description], colspan=3))
    return [f"<TR>{r}</TR>" for r in rows]


def steps_table(spec: Spec, property_name: str, steps: Sequence[TraceStep]) -> Html:
    """The HTML-like label of the table node: the property, then one row per step."""
    rows = _header(spec, property_name)
    rows.append("<TR>" + "".join(_cell([h], bold=True) for h in ("#", "event", "changes")) + "</TR>")
    changes = changed_keys(steps)
    prev: dict[str, object] | None = None
    for i, (number, step) in enumerate(zip(step_numbers(steps), steps, strict=True)):
        if prev is None:
            detail = _full_state(step.state)
        else:
            moved = [f"{k}: {_show(prev[k])} -> {_show(step.state[k])}" for k in changes[i]]
            detail = moved or ["(no change)"]
        bg = "#ffe4e1" if i == len(steps) - 1 else ""
        rows.append("<TR>" + _cell([str(number)], bgcolor=bg) + _cell([_call(spec, step)], bgcolor=bg)
                    + _cell(detail, bgcolor=bg) + "</TR>")
        prev = step.state
    table = '<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="4">'
    return Html(table + "".join(rows) + "</TABLE>")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def counterexample_graph(spec: Spec, property_name: str, steps: Sequence[TraceStep]) -> Graph:
    """The counterexample diagram (see the module docstring)."""
    g = Graph(f"{spec.name}-cex-{property_name}")
    g.attrs.update(label=f"{spec.name}: counterexample to {property_name}", labelloc="t",
                   fontname=FONT, nodesep=0.4, ranksep=0.6)
    g.node_attrs.update(shape="box", style="rounded", fontname=FONT)
    g.edge_attrs.update(fontname=FONT, fontsize=10)
    g.node("steps", shape="plaintext", style="", fontsize=11, label=steps_table(spec, property_name, steps))
    for obj, hl in trace_highlights(spec, steps).items():
        cluster = g.subgraph(f"cluster_{obj}", label=object_title(spec, obj), fontname=FONT,
                             style="rounded", color="gray40")
        fill_lifecycle(cluster, spec, obj, hl)
    return g


def counterexample_dot(spec: Spec, property_name: str, steps: Sequence[TraceStep]) -> str:
    """The DOT text of the counterexample diagram."""
    return counterexample_graph(spec, property_name, steps).source()


def write_counterexample(spec: Spec, property_name: str, steps: Sequence[TraceStep], out_dir: str | Path,
                         svg: bool = True) -> list[Path]:
    """Write ``<spec>-cex-<property>.dot`` (and ``.svg``) into ``out_dir``; return the written paths."""
    stem = f"{spec.name}-cex-{_safe(property_name)}"
    return write_diagrams({stem: counterexample_dot(spec, property_name, steps)}, out_dir, svg=svg)
