"""Paths and a tiny executor for the diagram tests: fire spec events to produce real traces."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from morphcache.diagrams import TraceStep
from morphcache.proofs.explicit import ExplicitSystem
from morphcache.spec.model import Spec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "spec" / "hybrid.yaml"
COMMITTED = ROOT / "diagrams"


def run(spec: Spec, calls: Sequence[tuple[str, dict[str, int]]]) -> list[TraceStep]:
    """Execute ``(event, args)`` calls from the initial state (each must be enabled); the trace starts
    with that state, keyed like the checker's traces (``tail[0]``, ``seq[r0]``, ``block[r0,1]``)."""
    system = ExplicitSystem(spec)
    state = system.initial
    steps = [TraceStep(None, {}, system.as_dict(state))]
    for event, args in calls:
        nxt = system.fire(state, event, args)
        assert nxt is not None, f"{event}{args} is not enabled"
        state = nxt
        steps.append(TraceStep(event, dict(args), system.as_dict(state)))
    return steps
