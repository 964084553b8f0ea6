"""Unbounded proofs: relative induction over a Houdini fixpoint, then k-induction.

The textbook obligations, one method each:

* initiation   ``Init(s0) => P(s0)``
* consecution  ``J(s0) and T(s0, s1) => P(s1)`` where J is the conjunction of all candidates
* k-induction  ``P(s0..s_{k-1}) and J(s0..s_k) and T^k => P(s_k)`` with a bounded base case

Houdini: start with every lemma and property as a candidate, drop those whose consecution fails,
repeat until the set is stable.  The survivors form an inductive invariant that holds initially,
so each of them is PROVED.  A candidate that dropped out is handed to BMC and to k-induction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import z3

from morphcache.spec.model import Property

from .system import TransitionSystem

if TYPE_CHECKING:
    from .deadline import Deadline


class Unknown(Exception):
    """Z3 answered unknown (or timed out): never counted as proved or refuted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SolverLimits:
    """Per-query limits: ``timeout_ms`` wall-clock, ``rlimit`` deterministic resource units (0 = none),
    and an optional overall ``deadline`` that cuts every query's timeout to the time left."""

    timeout_ms: int = 60_000
    rlimit: int = 0
    deadline: Deadline | None = field(default=None, compare=False)

    def solver(self) -> z3.Solver:
        """A fresh solver with these limits."""
        if self.deadline is not None:
            from .deadline import BoundedSolver

            s: z3.Solver = BoundedSolver(self.timeout_ms, self.deadline)
        else:
            s = z3.Solver()
            s.set("timeout", self.timeout_ms)
        if self.rlimit:
            s.set("rlimit", self.rlimit)
        return s


def is_valid(limits: SolverLimits, premises: list[Any], goal: Any) -> bool:
    """Whether ``premises => goal`` is valid; raise :class:`Unknown` if Z3 cannot tell."""
    solver = limits.solver()
    solver.add(*premises)
    solver.add(z3.Not(goal))
    answer = solver.check()
    if answer == z3.unknown:
        raise Unknown(solver.reason_unknown())
    return answer == z3.unsat


class Induction:
    """Inductive proofs of a set of candidate invariants over a transition system."""

    def __init__(self, ts: TransitionSystem, limits: SolverLimits) -> None:
        self.ts = ts
        self.limits = limits
        self.s0 = ts.state("0")
        self.s1 = ts.state("1")
        self._init_pairs: list[tuple[Any, Any]] | None = None

    def initiation(self, prop: Property) -> bool:
        """``Init(s0) => P(s0)``: the property with the initial values substituted, simplified to a
        constant (a solver call only if it does not simplify to one)."""
        goal = z3.simplify(z3.substitute(self.ts.holds(prop, self.s0), *self._initial()))
        if z3.is_true(goal) or z3.is_false(goal):
            return z3.is_true(goal)
        return is_valid(self.limits, [self.ts.init(self.s0)], goal)

    def _initial(self) -> list[tuple[Any, Any]]:
        """``(slot constant, initial value)`` of every slot of ``s0``."""
        if self._init_pairs is None:
            solver = z3.Solver()
            solver.add(self.ts.init(self.s0))
            solver.check()
            model = solver.model()
            self._init_pairs = [(self.s0[name], model.eval(self.s0[name], model_completion=True))
                                for name, _, _ in self.ts.slots]
        return self._init_pairs

    def consecution(self, prop: Property, assumed: list[Property]) -> bool:
        """``Domain(s0) and J(s0) and T(s0, s1) => P(s1)`` with J the conjunction of ``assumed``."""
        premises = [self.ts.domain(self.s0), self.ts.trans(self.s0, self.s1)]
        premises += [self.ts.holds(a, self.s0) for a in assumed]
        return is_valid(self.limits, premises, self.ts.holds(prop, self.s1))

    def houdini(self, candidates: list[Property],
                progress: Callable[[str], None] | None = None) -> list[Property]:
        """The largest subset of ``candidates`` that holds initially and is inductive relative to itself.

        One query asks whether every survivor is preserved by every step; each counterexample to
        induction (a model) drops the candidates it breaks, until the query is unsatisfiable.
        """
        alive = [c for c in candidates if self.initiation(c)]
        solver = self.limits.solver()
        solver.add(self.ts.domain(self.s0), self.ts.trans(self.s0, self.s1))
        before = {c.name: self.ts.holds(c, self.s0) for c in alive}
        after = {c.name: self.ts.holds(c, self.s1) for c in alive}
        while alive:
            solver.push()
            solver.add(*[before[c.name] for c in alive])
            solver.add(z3.Or([z3.Not(after[c.name]) for c in alive]))
            answer = solver.check()
            model = solver.model() if answer == z3.sat else None
            reason = solver.reason_unknown() if answer == z3.unknown else ""
            solver.pop()
            if answer == z3.unknown:
                raise Unknown(reason)
            if model is None:
                break
            broken = [c for c in alive if z3.is_false(model.eval(after[c.name], model_completion=True))]
            if progress:
                progress(f"induction: dropping {', '.join(c.name for c in broken)}")
            alive = [c for c in alive if c not in broken]
        return alive

    def k_induction(self, prop: Property, assumed: list[Property], k: int) -> bool:
        """The inductive step of k-induction (the base case is a search to depth k-1, run by the caller)."""
        return self.k_induction_all([prop], assumed, k)

    def k_induction_all(self, props: list[Property], assumed: list[Property], k: int) -> bool:
        """The inductive step of k-induction for the conjunction of ``props``."""
        states = [self.ts.state(f"k{i}") for i in range(k + 1)]
        step = self.ts.trans(self.s0, self.s1)
        premises = []
        for i, s in enumerate(states):
            premises.append(self.ts.domain(s))
            premises += [self.ts.holds(a, s) for a in assumed]
            if i < k:
                premises += [self.ts.holds(p, s) for p in props]
                premises.append(self.ts.rename(step, (self.s0, s), (self.s1, states[i + 1])))
        # Distinct states: the simple-path constraint makes k-induction complete for finite systems.
        for i in range(k + 1):
            for j in range(i + 1, k + 1):
                premises.append(z3.Or([states[i][n] != states[j][n] for n, _, _ in self.ts.slots]))
        return is_valid(self.limits, premises, z3.And([self.ts.holds(p, states[k]) for p in props]))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``fn`` and return its result and the seconds it took."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start
