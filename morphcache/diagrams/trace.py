"""Counterexample traces: which edges a trace traversed, per object.

A trace is a list of :class:`TraceStep`.  Each step names the event that fired (None for the
starting state), its arguments, and the *full* state after it, keyed like ``tail[0]``, ``fill[1]``,
``frontier``, ``graph``.  Moves of an object's state are matched against the spec: the firing
event's own edge, or a foreign write (an effect of another object's event); a move that matches
neither is kept as an ``extra`` edge so that nothing the trace did is hidden.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from morphcache.spec.model import PAGE, Event, Spec

from .lifecycle import Highlight
from .refs import foreign_writes

_KEY = re.compile(r"^([A-Za-z_]\w*)\[(\d+)\]$")


@dataclass(frozen=True)
class TraceStep:
    """One step of a counterexample.

    ``event``: the event that fired, or None for the starting state.  ``args``: its arguments
    (``{"p": 0}`` for a page event, plus its params).  ``state``: the full state after the step,
    keyed ``name[page]`` for per-page variables and objects and ``name`` for system ones.
    """

    event: str | None
    args: dict[str, int] = field(default_factory=dict)
    state: dict[str, object] = field(default_factory=dict)


def step_numbers(steps: Sequence[TraceStep]) -> list[int]:
    """Step numbers as shown: 0 for a starting state (first step, no event), events from 1."""
    first = 0 if steps and steps[0].event is None else 1
    return [first + i for i in range(len(steps))]


def split_key(key: str) -> tuple[str, int | None]:
    """``tail[2]`` -> ``("tail", 2)``; ``frontier`` -> ``("frontier", None)``."""
    m = _KEY.match(key)
    return (m.group(1), int(m.group(2))) if m else (key, None)


def key_order(key: str) -> tuple[int, int, str]:
    """Sort key for state keys: system names first, then by page, then by name."""
    name, page = split_key(key)
    return (0, 0, name) if page is None else (1, page, name)


def object_key(spec: Spec, obj: str, page: int | None) -> str:
    """The state key of ``obj`` at ``page`` (``tail[0]``), or ``obj`` for a system object."""
    return f"{obj}[{page}]" if spec.objects[obj].scope == PAGE else obj


def _event(spec: Spec, name: str | None) -> Event | None:
    if name is None:
        return None
    try:
        return spec.event(name)
    except KeyError:
        return None


def _tag(number: int, page: int | None) -> str:
    return str(number) if page is None else f"{number} (p={page})"


def _changes(before: dict[str, object] | None, after: dict[str, object]) -> list[str]:
    if before is None:
        return []
    return [k for k in sorted(after, key=key_order) if k in before and before[k] != after[k]]


class _Collector:
    """Accumulates one :class:`Highlight` per object touched by the trace."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.by_object: dict[str, Highlight] = {}

    def hl(self, obj: str) -> Highlight:
        return self.by_object.setdefault(obj, Highlight())

    def own_move(self, event: Event, number: int, page: int | None, prev: dict[str, object] | None,
                 state: dict[str, object]) -> None:
        key = object_key(self.spec, event.owner, page)
        guess = event.sources[0] if len(event.sources) == 1 else None
        before = prev.get(key, guess) if prev is not None else guess
        after = state.get(key, event.target)
        hl = self.hl(event.owner)
        tag = _tag(number, page)
        if before in event.sources and after == event.target:
            hl.edges.setdefault((event.name, str(before), event.target), []).append(tag)
        else:
            hl.extra.append((None if before is None else str(before), str(after), f"{tag} {event.name}"))
        if before is not None:
            hl.visited.add(str(before))
        hl.visited.add(str(after))

    def other_move(self, event: Event | None, number: int, key: str, before: object, after: object) -> None:
        obj, page = split_key(key)
        hl = self.hl(obj)
        tag = _tag(number, page)
        title = f"{event.owner}.{event.name}" if event else ""
        writes = foreign_writes(self.spec, obj)
        if any(w.title == title and w.state in (after, None) for w in writes):
            hl.foreign.setdefault((title, str(after)), []).append(tag)
        else:
            hl.extra.append((str(before), str(after), f"{tag} {event.name if event else '?'}"))
        hl.visited.update((str(before), str(after)))

    def final(self, state: dict[str, object]) -> None:
        for obj in list(self.by_object):
            spec_obj = self.spec.objects[obj]
            hl = self.by_object[obj]
            if spec_obj.scope != PAGE:
                if obj in state:
                    hl.final.setdefault(str(state[obj]), [])
                continue
            for key in sorted(state, key=key_order):
                name, page = split_key(key)
                if name == obj and page is not None:
                    hl.final.setdefault(str(state[key]), []).append(f"p{page}")


def trace_highlights(spec: Spec, steps: Sequence[TraceStep]) -> dict[str, Highlight]:
    """Object name -> what the trace did to it, for the objects the trace touched (spec order)."""
    col = _Collector(spec)
    prev: dict[str, object] | None = None
    for number, step in zip(step_numbers(steps), steps, strict=True):
        event = _event(spec, step.event)
        page = step.args.get("p") if event is not None and event.scope == PAGE else None
        own = object_key(spec, event.owner, page) if event is not None else None
        if event is not None:
            col.own_move(event, number, page, prev, step.state)
        for key in _changes(prev, step.state):
            name, _ = split_key(key)
            if name in spec.objects and key != own:
                assert prev is not None
                col.other_move(event, number, key, prev[key], step.state[key])
        prev = dict(step.state)
    if steps:
        col.final(steps[-1].state)
    return {obj: col.by_object[obj] for obj in spec.objects if obj in col.by_object}


def changed_keys(steps: Sequence[TraceStep]) -> list[list[str]]:
    """Per step, the state keys whose value differs from the previous step (none for the first)."""
    out: list[list[str]] = []
    prev: dict[str, object] | None = None
    for step in steps:
        out.append(_changes(prev, step.state))
        prev = step.state
    return out
