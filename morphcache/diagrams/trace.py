"""Counterexample traces: which edges a trace traversed, per object.

A trace is a list of :class:`TraceStep`.  Each step names the event that fired (None for the
starting state), its arguments, and the *full* state after it, keyed like the checker's slots:
``tail[0]`` (per page), ``frontier[r1]`` (per reader), ``block[r0,2]`` (per reader and page),
``graph`` (system).  Moves of an object's state are matched against the spec: the firing
event's own edge, or a foreign write (an effect of another object's event); a move that matches
neither is kept as an ``extra`` edge so that nothing the trace did is hidden.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from morphcache.spec.model import SCOPE_ARGS, Event, Spec

from .lifecycle import Highlight
from .refs import foreign_writes

_KEY = re.compile(r"^([A-Za-z_]\w*)\[(?:r(\d+))?,?(\d+)?\]$")


@dataclass(frozen=True)
class TraceStep:
    """One step of a counterexample.

    ``event``: the event that fired, or None for the starting state.  ``args``: its arguments
    (``{"r": 1, "p": 0}``, as the event takes them, plus its params).  ``state``: the full state after
    the step, keyed ``name[page]``, ``name[rREADER]``, ``name[rREADER,page]`` or ``name``.
    """

    event: str | None
    args: dict[str, int] = field(default_factory=dict)
    state: dict[str, object] = field(default_factory=dict)


def step_numbers(steps: Sequence[TraceStep]) -> list[int]:
    """Step numbers as shown: 0 for a starting state (first step, no event), events from 1."""
    first = 0 if steps and steps[0].event is None else 1
    return [first + i for i in range(len(steps))]


def split_key(key: str) -> tuple[str, int | None, int | None]:
    """``tail[2]`` -> ``("tail", None, 2)``; ``block[r1,2]`` -> ``("block", 1, 2)``; ``seq[r0]`` ->
    ``("seq", 0, None)``; ``frontier`` -> ``("frontier", None, None)``."""
    m = _KEY.match(key)
    if not m or (m.group(2) is None and m.group(3) is None):
        return key, None, None
    reader, page = m.group(2), m.group(3)
    return m.group(1), None if reader is None else int(reader), None if page is None else int(page)


def where(reader: int | None, page: int | None) -> str:
    """``r1``, ``p0``, ``r1,p0`` or the empty string."""
    return ",".join(part for part in (None if reader is None else f"r{reader}", None if page is None else f"p{page}")
                    if part)


def key_order(key: str) -> tuple[int, int, int, str]:
    """Sort key for state keys: system names first, then per reader, per page, per reader and page."""
    name, reader, page = split_key(key)
    return (0 if reader is None else 1 + reader, -1 if page is None else page, 0, name)


def object_key(spec: Spec, obj: str, reader: int | None, page: int | None) -> str:
    """The state key of ``obj`` for ``reader`` and ``page`` as its scope takes them."""
    dims = SCOPE_ARGS[spec.objects[obj].scope]
    r = reader if "r" in dims else None
    p = page if "p" in dims else None
    if r is None:
        return obj if p is None else f"{obj}[{p}]"
    return f"{obj}[r{r}]" if p is None else f"{obj}[r{r},{p}]"


def _event(spec: Spec, name: str | None) -> Event | None:
    if name is None:
        return None
    try:
        return spec.event(name)
    except KeyError:
        return None


def _tag(number: int, reader: int | None, page: int | None) -> str:
    args = ", ".join(f"{k}={v}" for k, v in (("r", reader), ("p", page)) if v is not None)
    return f"{number} ({args})" if args else str(number)


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

    def own_move(self, event: Event, number: int, reader: int | None, page: int | None,
                 prev: dict[str, object] | None, state: dict[str, object]) -> None:
        key = object_key(self.spec, event.owner, reader, page)
        guess = event.sources[0] if len(event.sources) == 1 else None
        before = prev.get(key, guess) if prev is not None else guess
        after = state.get(key, event.target)
        hl = self.hl(event.owner)
        tag = _tag(number, reader, page)
        if before in event.sources and after == event.target:
            hl.edges.setdefault((event.name, str(before), event.target), []).append(tag)
        else:
            hl.extra.append((None if before is None else str(before), str(after), f"{tag} {event.name}"))
        if before is not None:
            hl.visited.add(str(before))
        hl.visited.add(str(after))

    def other_move(self, event: Event | None, number: int, key: str, before: object, after: object) -> None:
        obj, reader, page = split_key(key)
        hl = self.hl(obj)
        tag = _tag(number, reader, page)
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
            if not SCOPE_ARGS[spec_obj.scope]:
                if obj in state:
                    hl.final.setdefault(str(state[obj]), [])
                continue
            for key in sorted(state, key=key_order):
                name, reader, page = split_key(key)
                if name == obj and (reader is not None or page is not None):
                    hl.final.setdefault(str(state[key]), []).append(where(reader, page))


def trace_highlights(spec: Spec, steps: Sequence[TraceStep]) -> dict[str, Highlight]:
    """Object name -> what the trace did to it, for the objects the trace touched (spec order)."""
    col = _Collector(spec)
    prev: dict[str, object] | None = None
    for number, step in zip(step_numbers(steps), steps, strict=True):
        event = _event(spec, step.event)
        reader, page = step.args.get("r"), step.args.get("p")
        own = object_key(spec, event.owner, reader, page) if event is not None else None
        if event is not None:
            dims = SCOPE_ARGS[event.scope]
            col.own_move(event, number, reader if "r" in dims else None, page if "p" in dims else None,
                         prev, step.state)
        for key in _changes(prev, step.state):
            name, _, _ = split_key(key)
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
