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

    def __init__(self, ts: TransitionSystem, limits: SolverLimits, assumed: list[Property] | None = None) -> None:
        self.ts = ts
        self.assumed = assumed or []
        self.solver = limits.solver()
        self.states = [ts.state("b0")]
        self.solver.add(ts.init(self.states[0]))

    def extend(self) -> None:
        """Add one more transition to the unrolling.

        Invariants already proved by induction hold in every reachable state, so asserting them
        in each new state is sound and prunes the search.
        """
        nxt = self.ts.state(f"b{len(self.states)}")
        self.solver.add(self.ts.trans(self.states[-1], nxt))
        self.solver.add(*[self.ts.holds(a, nxt) for a in self.assumed])
        self.states.append(nxt)

    def violation(self, bad: Any, earlier: Any = None) -> z3.ModelRef | None:
        """A model of the unrolling where ``bad`` holds in the last state, or None.

        ``earlier(s)``, if given, is assumed in every state before the last: sound when shallower
        depths were already shown free of ``bad``, and it prunes the search.
        """
        self.solver.push()
        if earlier is not None:
            self.solver.add(*[earlier(s) for s in self.states[:-1]])
        self.solver.add(bad)
        answer = self.solver.check()
        model = self.solver.model() if answer == z3.sat else None
        reason = self.solver.reason_unknown() if answer == z3.unknown else ""
        self.solver.pop()
        if answer == z3.unknown:
            raise Unknown(reason)
        return model


def shortest_counterexamples(ts: TransitionSystem, props: list[Property], max_depth: int, limits: SolverLimits,
                             progress: Callable[[str], None] | None = None,
                             assumed: list[Property] | None = None, stop_at_first: bool = False) -> dict[str, Trace]:
    """For each of ``props``, a shortest violating trace of at most ``max_depth`` steps, if any.

    One unrolling serves every property.  At each depth one query asks whether any pending property
    fails in the last state; each model found refutes the properties it breaks (at this depth, so
    their traces are shortest), and the query is repeated for the rest until it is unsatisfiable.
    Every pending property held in all shallower states (else it would have been found there), so
    they are assumed before the last state.  ``assumed`` are invariants already proved.
    ``stop_at_first`` ends the search at the first depth where anything is refuted.
    """
    unrolling = Unrolling(ts, limits, assumed)
    found: dict[str, Trace] = {}
    for depth in range(max_depth + 1):
        pending = [p for p in props if p.name not in found]
        if not pending:
            break
        if depth:
            unrolling.extend()
        if progress:
            progress(f"bmc: depth {depth}, {len(pending)} properties")
        last = unrolling.states[-1]

        def held(s: dict[str, Any], earlier: tuple[Property, ...] = tuple(pending)) -> Any:
            return z3.And([ts.holds(p, s) for p in earlier])

        while pending:
            model = unrolling.violation(z3.Or([z3.Not(ts.holds(p, last)) for p in pending]), held)
            if model is None:
                break
            broken = [p for p in pending if z3.is_false(model.eval(ts.holds(p, last), model_completion=True))]
            for prop in broken:
                found[prop.name] = read_trace(ts, model, unrolling.states, prop)
            pending = [p for p in pending if p not in broken]
        if stop_at_first and found:
            break
    return found


def search_all(ts: TransitionSystem, props: list[Property], depth: int, limits: SolverLimits,
               progress: Callable[[str], None] | None = None) -> Trace | None:
    """A shortest trace of at most ``depth`` steps violating any of ``props``, or None."""
    found = shortest_counterexamples(ts, props, depth, limits, progress, stop_at_first=True)
    return next(iter(found.values()), None)
