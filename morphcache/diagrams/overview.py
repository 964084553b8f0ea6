"""The overview: every object as a cluster of its states, and how the objects depend on each other.

Each cluster holds its object's states and events (parallel events merged into one edge, labelled
with their names) under a title node.  Between the title nodes, a dashed edge ``A -> B`` says that
events of A depend on B: the names listed read B's state (or a variable B owns) in their guard, and
the names listed as ``/ event`` write B's state or variables in their effects.
"""

from __future__ import annotations

from morphcache.spec.model import Spec

from .dot import Graph
from .lifecycle import FONT, SCOPE_WORDS, start_id, state_id
from .refs import referenced_objects, written_objects

LEGEND = "dashed A -> B: events of A whose guard reads B (event) or whose effects write B (/ event)"


def title_id(obj: str) -> str:
    """The node id of an object's title node in the overview."""
    return f"{obj}/title"


def _clusters(g: Graph, spec: Spec) -> None:
    for name, obj in spec.objects.items():
        c = g.subgraph(f"cluster_{name}", label="", style="rounded", color="gray40")
        c.node(title_id(name), label=f"{name}\n({SCOPE_WORDS[obj.scope]})", shape="plaintext", fontsize=14)
        c.node(start_id(name), shape="point", width=0.1, label="")
        c.edge(title_id(name), start_id(name), style="invis")
        for state in obj.states:
            c.node(state_id(name, state), label=state)
        c.edge(start_id(name), state_id(name, obj.initial))
        moves: dict[tuple[str, str], list[str]] = {}
        for event in obj.events:
            for source in event.sources:
                moves.setdefault((source, event.target), []).append(event.name)
        entered = {obj.initial} | {target for source, target in moves if source != target}
        for state in obj.states:
            if state not in entered:  # reached only through other objects: keep it below the title
                c.edge(title_id(name), state_id(name, state), style="invis")
        for (source, target), names in moves.items():
            c.edge(state_id(name, source), state_id(name, target), label="\n".join(names))


def dependencies(spec: Spec) -> dict[tuple[str, str], list[str]]:
    """``(A, B)`` -> A's events that read B in their guard, then ``/ event`` for those writing B."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for event in spec.events:
        for other in referenced_objects(spec, event.guard):
            if other != event.owner:
                pairs.setdefault((event.owner, other), []).append(event.name)
    writes: dict[tuple[str, str], list[str]] = {}
    for event in spec.events:
        for other in written_objects(spec, event):
            writes.setdefault((event.owner, other), []).append(f"/ {event.name}")
    for pair, names in writes.items():
        pairs.setdefault(pair, []).extend(names)
    return pairs


def overview_graph(spec: Spec) -> Graph:
    """The overview diagram of all objects of ``spec``."""
    g = Graph(f"{spec.name}-overview")
    g.attrs.update(newrank="true", label=f"{spec.name}: all objects\n{LEGEND}", labelloc="t",
                   fontname=FONT, nodesep=0.3, ranksep=0.5)
    g.node_attrs.update(shape="box", style="rounded", fontname=FONT, fontsize=11)
    g.edge_attrs.update(fontname=FONT, fontsize=9)
    _clusters(g, spec)
    for (a, b), names in dependencies(spec).items():
        g.edge(title_id(a), title_id(b), label="\n".join(names), style="dashed", color="royalblue",
               fontcolor="royalblue")
    return g


def overview_dot(spec: Spec) -> str:
    """The DOT text of the overview."""
    return overview_graph(spec).source()
