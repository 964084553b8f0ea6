"""Paths and a tiny executor for the diagram tests: fire spec events to produce real traces."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from morphcache.diagrams import TraceStep
from morphcache.spec.interp import compile_expr
from morphcache.spec.model import PAGE, Spec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "spec" / "hybrid.yaml"
COMMITTED = ROOT / "diagrams"


def initial_state(spec: Spec) -> dict[str, object]:
    """The initial state, keyed like a counterexample: ``tail[0]``, ``frontier``, ``graph``."""
    state: dict[str, object] = {}
    for name, decl in spec.vars.items():
        if decl.scope == PAGE:
            state.update({f"{name}[{p}]": decl.init for p in spec.page_range()})
        else:
            state[name] = decl.init
    for name, obj in spec.objects.items():
        if obj.scope == PAGE:
            state.update({f"{name}[{p}]": obj.initial for p in spec.page_range()})
        else:
            state[name] = obj.initial
    return state


def _split(spec: Spec, state: dict[str, object]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    names: dict[str, Any] = {**spec.constants, "pages": spec.pages}
    arrays: dict[str, list[Any]] = {}
    for key, value in state.items():
        if key.endswith("]"):
            name, page = key[:-1].split("[")
            arrays.setdefault(name, [None] * spec.pages)[int(page)] = value
        else:
            names[key] = value
    return names, arrays


def fire(spec: Spec, state: dict[str, object], event: str, args: dict[str, int]) -> dict[str, object]:
    """Fire ``event`` with ``args`` (its source state and guard must hold); return the next state."""
    ev = spec.event(event)
    names, arrays = _split(spec, state)
    names.update(args)
    key = f"{ev.owner}[{args['p']}]" if ev.scope == PAGE else ev.owner
    assert state[key] in ev.sources, f"{event}: {key} is {state[key]}"
    assert compile_expr(ev.guard)(names, arrays), f"{event}{args}: guard is false"
    new = dict(state)
    new[key] = ev.target
    for eff in ev.effects:
        fn = compile_expr(eff.value)
        if eff.index is None:
            new[eff.target] = fn(names, arrays)
        elif eff.index == "p":
            new[f"{eff.target}[{args['p']}]"] = fn(names, arrays)
        else:
            for q in spec.page_range():
                new[f"{eff.target}[{q}]"] = fn({**names, "q": q}, arrays)
    return new


def run(spec: Spec, calls: Sequence[tuple[str, dict[str, int]]]) -> list[TraceStep]:
    """Execute ``(event, args)`` calls from the initial state; the trace starts with that state."""
    state = initial_state(spec)
    steps = [TraceStep(None, {}, dict(state))]
    for event, args in calls:
        state = fire(spec, state, event, args)
        steps.append(TraceStep(event, dict(args), dict(state)))
    return steps
