"""Bounded model checking: the shortest counterexample, found by deepening one step at a time.

At depth k the query is ``Init(s0) and T(s0,s1) and ... and T(s_{k-1}, s_k) and not P(s_k)``.
Depths are tried in order on one incremental solver, so the first trace found is a shortest one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import z3

from morphcache.spec.model import Property

from .induction import SolverLimits, Unknown
from .system import TransitionSystem
from .trace import Trace, read_trace


class Unrolling:
    """``Init(s0) and T(s0, s1) and ...``, grown one step at a time on a single solver."""

    def __init__(self, ts: TransitionSystem, limits: SolverLimits) -> None:
        self.ts = ts
        self.solver = limits.solver()
        self.states = [ts.state("b0")]
        self.solver.add(ts.init(self.states[0]))

    def extend(self) -> None:
        """Add one more transition to the unrolling."""
        nxt = self.ts.state(f"b{len(self.states)}")
        self.solver.add(self.ts.trans(self.states[-1], nxt))
        self.states.append(nxt)

    def violation(self, bad: Any) -> z3.ModelRef | None:
        """A model of the unrolling where ``bad`` holds in the last state, or None."""
        self.solver.push()
        self.solver.add(bad)
        answer = self.solver.check()
        model = self.solver.model() if answer == z3.sat else None
        reason = self.solver.reason_unknown() if answer == z3.unknown else ""
        self.solver.pop()
        if answer == z3.unknown:
            raise Unknown(reason)
        return model


def shortest_counterexample(ts: TransitionSystem, prop: Property, max_depth: int, limits: SolverLimits,
                            progress: Callable[[str], None] | None = None) -> Trace | None:
    """The shortest trace of at most ``max_depth`` steps that violates ``prop``, or None."""
    unrolling = Unrolling(ts, limits)
    for depth in range(max_depth + 1):
        if depth:
            unrolling.extend()
        if progress:
            progress(f"bmc {prop.name}: depth {depth}")
        model = unrolling.violation(z3.Not(ts.holds(prop, unrolling.states[-1])))
        if model is not None:
            return read_trace(ts, model, unrolling.states, prop)
    return None


def search_all(ts: TransitionSystem, props: list[Property], depth: int, limits: SolverLimits,
               progress: Callable[[str], None] | None = None) -> Trace | None:
    """A shortest trace of at most ``depth`` steps violating any of ``props``, or None."""
    unrolling = Unrolling(ts, limits)
    for k in range(depth + 1):
        if k:
            unrolling.extend()
        if progress:
            progress(f"bmc: depth {k}")
        last = unrolling.states[-1]
        model = unrolling.violation(z3.Or([z3.Not(ts.holds(p, last)) for p in props]))
        if model is not None:
            for p in props:
                if z3.is_false(model.eval(ts.holds(p, last), model_completion=True)):
                    return read_trace(ts, model, unrolling.states, p)
    return None
