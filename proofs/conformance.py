"""Trace conformance: is one recorded runtime step allowed by the spec's transition relation?

The runtime records each step as the sequence view before and after it (keys ``name`` for system
slots, ``name[i]`` for per-page slots, states by name) plus the event and its arguments.  This
module checks the step with Z3 against the same encoding the proofs use, independently of the
runtime's compiled guards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import z3

from morphcache.spec.model import Spec

from .system import TransitionSystem
from .terms import parse_slot

_SYSTEMS: dict[tuple[int, int, int, tuple[tuple[str, int], ...]], tuple[Spec, TransitionSystem]] = {}


def _system(spec: Spec, pages: int, readers: int, constants: tuple[tuple[str, int], ...]) -> TransitionSystem:
    """The transition system of ``spec`` for ``pages`` pages and ``readers`` readers (cached per spec object)."""
    key = (id(spec), pages, readers, constants)
    hit = _SYSTEMS.get(key)
    if hit is None or hit[0] is not spec:
        if len(_SYSTEMS) > 256:
            _SYSTEMS.clear()
        hit = (spec, TransitionSystem(dataclasses.replace(spec, pages=pages, readers=readers), dict(constants)))
        _SYSTEMS[key] = hit
    return hit[1]


def _size_of(state: Mapping[str, Any]) -> tuple[int, int]:
    """``(pages, readers)`` a recorded state has slots for."""
    pages = readers = 0
    for key in state:
        _, reader, page = parse_slot(key)
        if page is not None:
            pages = max(pages, page + 1)
        if reader is not None:
            readers = max(readers, reader + 1)
    return pages, readers


def _value(ts: TransitionSystem, name: str, kind: str, value: Any) -> Any:
    if kind == "state":
        obj = ts.spec.objects[name.split("[", 1)[0]]
        if value not in obj.states:
            raise ValueError(f"{name}: '{value}' is not a state of '{obj.name}'")
        return z3.IntVal(obj.states.index(value))
    if kind == "bool":
        return z3.BoolVal(bool(value))
    return z3.IntVal(int(value))


def check_step(spec: Spec, constants: Mapping[str, int], before: Mapping[str, Any], event: str,
               args: Mapping[str, int], after: Mapping[str, Any]) -> str | None:
    """None if the spec allows ``before --event(args)--> after``, else the reason it does not.

    Ghost variables are what is physically so; a runtime does not record them.  A ghost slot missing
    from the recorded states is left free: the step conforms if some values of the ghosts allow it.
    """
    pages, readers = _size_of(before)
    if _size_of(after) != (pages, readers):
        return f"the state has {pages} pages and {readers} readers before the step and {_size_of(after)} after"
    ts = _system(spec, max(pages, 1), max(readers, 1), tuple(sorted(constants.items())))
    page, reader = args.get("p"), args.get("r")
    actions = [a for a in ts.actions if a.event.name == event and a.page == page and a.reader == reader]
    if not actions:
        return f"no event '{event}' at r={reader}, p={page} in a state of {pages} pages and {readers} readers"
    action = actions[0]
    s, t = ts.state("before"), ts.state("after")
    fixed = []
    ghosts = spec.ghosts
    for name, kind, _ in ts.slots:
        if parse_slot(name)[0] in ghosts and name not in before and name not in after:
            continue
        if name not in before or name not in after:
            return f"slot '{name}' missing from the recorded state"
        fixed += [s[name] == _value(ts, name, kind, before[name]), t[name] == _value(ts, name, kind, after[name])]
    for prm in action.event.params:
        fixed.append(s[f"@{event}.{prm.name}"] == int(args[prm.name]))
    solver = z3.Solver()
    solver.add(*fixed, ts.domain(s))
    solver.add(ts.fire(action, s, t), ts.domain(t))
    if solver.check() == z3.sat:
        return None
    return _diagnose(ts, action, s, t, fixed)


def _diagnose(ts: TransitionSystem, action: Any, s: Any, t: Any, fixed: list[Any]) -> str:
    """Name the first part of the step the spec rejects: source state, guard, a slot, the domain."""
    def holds(cond: Any) -> bool:
        solver = z3.Solver()
        solver.add(*fixed, z3.Not(cond))
        return solver.check() == z3.unsat

    ev = action.event
    if not holds(ts.enabled(action, s)):
        return f"'{ev.name}' is not enabled in the state before (source state or guard is false)"
    writes = ts.updates(action, s)
    for name, _, _ in ts.slots:
        if not holds(t[name] == writes.get(name, s[name])):
            return f"slot '{name}' has a value the spec's '{ev.name}' does not produce"
    return "the state after leaves a variable's declared domain"
