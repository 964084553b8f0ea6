"""Bounded model checking: the shortest counterexample, found by deepening one step at a time.

At depth k the query is ``Init(s0) and T(s0,s1) and ... and T(s_{k-1}, s_k) and not P(s_k)``.
Depths are tried in increasing order, so the first trace found is a shortest one.  Two facts prune
every query and are sound:

* invariants already proved by induction hold in every reachable state, so in every ``s_i``;
* a property still pending at depth k held in every state of depth < k (else it would have been
  refuted there), so it is assumed in ``s_0 .. s_{k-1}``.

Each depth is a fresh solver over the same formulas: Z3's preprocessing (which eliminates the
per-slot equalities of the transition relation) runs only on a non-incremental solver, and makes
these queries several times faster than one incremental unrolling.  The transition relation is
encoded once and renamed into each step with ``z3.substitute``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import z3

from morphcache.spec.model import Property

from .induction import SolverLimits, Unknown
from .system import State, TransitionSystem
from .trace import Trace, read_trace


class BoundedSearch:
    """Shortest violations of a set of properties, depth by depth, one fresh solver per query."""

    def __init__(self, ts: TransitionSystem, limits: SolverLimits, assumed: list[Property] | None = None) -> None:
        self.ts = ts
        self.limits = limits
        self.assumed = assumed or []
        self._a, self._b = ts.state("@a"), ts.state("@b")
        self._step = z3.And(ts.trans(self._a, self._b), *[ts.holds(a, self._b) for a in self.assumed])
        self.states: list[State] = [ts.state("b0")]
        self.base: list[Any] = [ts.init(self.states[0]), *[ts.holds(a, self.states[0]) for a in self.assumed]]
        self.steps: list[Any] = []  # steps[i]: s_i -> s_{i+1}

    def deepen(self, depth: int) -> None:
        """Unroll the relation to ``depth`` steps."""
        while len(self.states) <= depth:
            nxt = self.ts.state(f"b{len(self.states)}")
            self.steps.append(self.ts.rename(self._step, (self._a, self.states[-1]), (self._b, nxt)))
            self.states.append(nxt)

    def violation(self, depth: int, bad: Any, earlier: list[Property],
                  limits: SolverLimits | None = None) -> z3.ModelRef | None:
        """A model of the depth-``depth`` unrolling where ``bad`` holds in the last state and every
        property of ``earlier`` holds in each state before it; None if there is none."""
        self.deepen(depth)
        solver = (limits or self.limits).solver()
        solver.add(*self.base, *self.steps[:depth])
        solver.add(*[self.ts.holds(p, s) for s in self.states[:depth] for p in earlier])
        solver.add(bad)
        answer = solver.check()
        if answer == z3.unknown:
            raise Unknown(f"{solver.reason_unknown()} at depth {depth}")
        return solver.model() if answer == z3.sat else None

    def run(self, props: list[Property], max_depth: int, start: int = 0,
            progress: Callable[[str], None] | None = None, stop_at_first: bool = False,
            seconds: float | None = None) -> dict[str, Trace]:
        """For each of ``props``, a shortest violating trace of at most ``max_depth`` steps, if any.

        ``start``: every depth below it is already known to be free of violations (an exhaustive
        explicit search), so it is not queried.  At each depth one query asks whether any pending
        property fails in the last state; each model found refutes the properties it breaks (at this
        depth, so their traces are shortest), and the query is repeated for the rest.  ``seconds``
        bounds the whole run: a query cut short raises :class:`Unknown` ("timeout").
        """
        found: dict[str, Trace] = {}
        deadline = None if seconds is None else time.perf_counter() + seconds
        for depth in range(start, max_depth + 1):
            pending = [p for p in props if p.name not in found]
            if not pending:
                break
            if progress:
                progress(f"bmc: depth {depth}, {len(pending)} properties")
            self.deepen(depth)
            last = self.states[depth]
            while pending:
                limits = self.limits
                if deadline is not None:
                    left = int((deadline - time.perf_counter()) * 1000)
                    if left <= 0:
                        raise Unknown(f"timeout: bounded search stopped at depth {depth}")
                    limits = SolverLimits(min(limits.timeout_ms, left), limits.rlimit)
                model = self.violation(depth, z3.Or([z3.Not(self.ts.holds(p, last)) for p in pending]), pending,
                                       limits)
                if model is None:
                    break
                broken = [p for p in pending if z3.is_false(model.eval(self.ts.holds(p, last), model_completion=True))]
                for prop in broken:
                    found[prop.name] = read_trace(self.ts, model, self.states[:depth + 1], prop)
                pending = [p for p in pending if p not in broken]
            if stop_at_first and found:
                break
        return found


def shortest_counterexamples(ts: TransitionSystem, props: list[Property], max_depth: int, limits: SolverLimits,
                             progress: Callable[[str], None] | None = None,
                             assumed: list[Property] | None = None, stop_at_first: bool = False) -> dict[str, Trace]:
    """For each of ``props``, a shortest violating trace of at most ``max_depth`` steps, if any
    (bounded model checking alone; ``assumed`` are invariants already proved)."""
    return BoundedSearch(ts, limits, assumed).run(props, max_depth, 0, progress, stop_at_first)


def search_all(ts: TransitionSystem, props: list[Property], depth: int, limits: SolverLimits,
               progress: Callable[[str], None] | None = None) -> Trace | None:
    """A shortest trace of at most ``depth`` steps violating any of ``props``, or None."""
    found = shortest_counterexamples(ts, props, depth, limits, progress, stop_at_first=True)
    return next(iter(found.values()), None)
