"""One object's lifecycle: its states, its events, and the other objects' events that set its state.

Nodes are the object's states (``obj.state``); a point node ``obj/start`` points at the initial
state.  Each event gives one edge per source state, labelled by :func:`labels.event_label`.  Effects
of other objects' events that set this object's state are dashed edges from a single ``any`` node
(``obj/any``), labelled ``owner.event`` and, for a conditional value, the branch condition.

A :class:`Highlight` (built from a counterexample trace) turns the traversed edges and visited states
red and bold and tags them with their step numbers; everything else is greyed out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from morphcache.spec.expr import render
from morphcache.spec.model import Spec

from .dot import Graph
from .labels import event_label, wrap_and
from .refs import ForeignWrite, foreign_writes

FONT = "Helvetica"
HOT = "red"
LOOP_SIDES = ("e", "w", "s", "n")  # self-loops of one state go round it, not on top of each other
COLD = "gray55"


def state_id(obj: str, state: str) -> str:
    """The node id of ``obj``'s ``state``."""
    return f"{obj}.{state}"


def start_id(obj: str) -> str:
    """The node id of ``obj``'s initial-state marker."""
    return f"{obj}/start"


def any_id(obj: str) -> str:
    """The node id standing for "any state of ``obj``" (the source of foreign writes)."""
    return f"{obj}/any"


@dataclass
class Highlight:
    """What a trace did to one object: traversed edges, visited states, where each page ended.

    ``edges`` maps ``(event, source, target)`` to step tags; ``foreign`` maps ``(owner.event,
    target)`` to step tags; ``extra`` lists moves that match no edge of the spec, as ``(source or
    None, target, tag)``; ``final`` maps a state to the pages (tags) that are in it after the last step.
    """

    edges: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    foreign: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    extra: list[tuple[str | None, str, str]] = field(default_factory=list)
    visited: set[str] = field(default_factory=set)
    final: dict[str, list[str]] = field(default_factory=dict)


def _steps_line(tags: list[str]) -> str:
    return ("step " if len(tags) == 1 else "steps ") + ", ".join(tags)


def foreign_label(write: ForeignWrite) -> str:
    """``owner.event``, plus ``[condition]`` when the written value is conditional."""
    if write.cond is None:
        return write.title
    return "\n".join(wrap_and(f"{write.title} [{render(write.cond)}]"))


def _hot(label: str, tags: list[str]) -> dict[str, str | float]:
    return {"label": f"{label}\n{_steps_line(tags)}", "color": HOT, "fontcolor": HOT, "penwidth": 2.5}


def _states(g: Graph, spec: Spec, obj: str, hl: Highlight | None) -> None:
    spec_obj = spec.objects[obj]
    g.node(start_id(obj), shape="point", width=0.12, label="")
    for state in spec_obj.states:
        attrs: dict[str, str | float] = {"label": state}
        if hl is not None:
            if state in hl.final:
                attrs["label"] = f"{state}\n(end: {', '.join(hl.final[state])})"
                attrs["style"] = "rounded,filled"
                attrs["fillcolor"] = "#ffe4e1"
            if state in hl.visited:
                attrs.update(color=HOT, fontcolor=HOT, penwidth=2.0)
            elif state not in hl.final:
                attrs.update(color=COLD, fontcolor=COLD)
        g.node(state_id(obj, state), **attrs)
    g.edge(start_id(obj), state_id(obj, spec_obj.initial))


def _own_edges(g: Graph, spec: Spec, obj: str, hl: Highlight | None) -> None:
    loops: dict[str, int] = {}
    for event in spec.objects[obj].events:
        label = event_label(event)
        for source in event.sources:
            tags = hl.edges.get((event.name, source, event.target)) if hl is not None else None
            attrs: dict[str, str | float] = {"label": label}
            if tags:
                attrs = _hot(label, tags)
            elif hl is not None:
                attrs.update(color=COLD, fontcolor=COLD)
            if source == event.target:
                side = LOOP_SIDES[loops.get(source, 0) % len(LOOP_SIDES)]
                loops[source] = loops.get(source, 0) + 1
                attrs.update(tailport=side, headport=side)
            g.edge(state_id(obj, source), state_id(obj, event.target), **attrs)


def _foreign_edges(g: Graph, spec: Spec, obj: str, hl: Highlight | None) -> None:
    writes = foreign_writes(spec, obj)
    if not writes:
        return
    cold = hl is not None and not hl.foreign
    g.node(any_id(obj), label="any", shape="box", style="rounded,dashed",
           **({"color": COLD, "fontcolor": COLD} if cold else {}))
    states = spec.objects[obj].states
    seen: set[tuple[str, str]] = set()
    for write in writes:
        targets = [write.state] if write.state is not None else list(states)
        for target in targets:
            if (write.title, target) in seen:
                continue
            seen.add((write.title, target))
            label = foreign_label(write)
            tags = hl.foreign.get((write.title, target)) if hl is not None else None
            attrs: dict[str, str | float] = {"label": label}
            if tags:
                attrs = _hot(label, tags)
            elif hl is not None:
                attrs.update(color=COLD, fontcolor=COLD)
            g.edge(any_id(obj), state_id(obj, target), style="dashed", **attrs)


def _extra_edges(g: Graph, obj: str, hl: Highlight | None) -> None:
    if hl is None:
        return
    for source, target, tag in hl.extra:
        tail = state_id(obj, source) if source is not None else start_id(obj)
        g.edge(tail, state_id(obj, target), label=tag, style="dotted", color=HOT, fontcolor=HOT, penwidth=2.5)


def fill_lifecycle(g: Graph, spec: Spec, obj: str, hl: Highlight | None = None) -> None:
    """Add ``obj``'s states and edges (optionally highlighted) to the graph or cluster ``g``."""
    _states(g, spec, obj, hl)
    _own_edges(g, spec, obj, hl)
    _foreign_edges(g, spec, obj, hl)
    _extra_edges(g, obj, hl)


SCOPE_WORDS = {"system": "system", "page": "per page", "reader": "per reader", "reader_page": "per reader and page"}


def object_title(spec: Spec, obj: str) -> str:
    """``obj (per page)``, ``(per reader)``, ``(per reader and page)`` or ``(system)``, then its
    description on a second line."""
    o = spec.objects[obj]
    head = f"{obj} ({SCOPE_WORDS[o.scope]})"
    return f"{head}\n{o.description}" if o.description else head


def lifecycle_graph(spec: Spec, obj: str) -> Graph:
    """The standalone lifecycle diagram of ``obj``."""
    g = Graph(f"{spec.name}-{obj}")
    g.attrs.update(label=f"{spec.name}: {object_title(spec, obj)}", labelloc="t",
                   fontname=FONT, nodesep=0.4, ranksep=0.6)
    g.node_attrs.update(shape="box", style="rounded", fontname=FONT)
    g.edge_attrs.update(fontname=FONT, fontsize=10)
    fill_lifecycle(g, spec, obj)
    return g


def lifecycle_dot(spec: Spec, obj: str) -> str:
    """The DOT text of ``obj``'s lifecycle."""
    return lifecycle_graph(spec, obj).source()
