"""Diversion: the recovery paths of every object are pairwise disjoint and cover every state.

For each object k and every state s satisfying the proved invariants (so every reachable state),
every page p and every hit position pos at which k is needed:

* disjoint     no two of k's paths hold at once;
* exhaustive   at least one path holds;
* in place     the ``in_place`` path holds exactly when k is ready.

Each obligation is one SMT query; a satisfying model is a one-state counterexample.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import z3

from morphcache.spec.expr import render
from morphcache.spec.model import Property

from .induction import SolverLimits, Unknown
from .system import TransitionSystem
from .trace import read_state


@dataclass(frozen=True)
class Obligation:
    """One partition obligation and, if refuted, the witness state."""

    name: str
    description: str
    holds: bool
    witness: dict[str, Any] | None = None
    page: int | None = None
    pos: int | None = None


class Partition:
    """The diversion obligations of a spec's lookup."""

    def __init__(self, ts: TransitionSystem, limits: SolverLimits, assumed: list[Property]) -> None:
        self.ts = ts
        self.limits = limits
        self.s = ts.state("part")
        self.pos = z3.Int("pos")
        self.base = [ts.domain(self.s), self.pos >= 0, self.pos <= ts.spec.pages * ts.terms.constants.get("C", 1)]
        self.base += [ts.holds(a, self.s) for a in assumed]
        self._solver: z3.Solver | None = None

    def _term(self, expr: Any, page: int) -> Any:
        return self.ts.terms.term(expr, self.s, {"p": page, "pos": self.pos})

    def _witness(self, name: str, text: str, conds: list[Any]) -> Obligation:
        if self._solver is None:  # one solver for every obligation: the base (invariants) is shared
            self._solver = self.limits.solver()
            self._solver.add(*self.base)
        solver = self._solver
        for page in range(self.ts.spec.pages):
            solver.push()
            solver.add(*[c(page) for c in conds])
            answer = solver.check()
            model = solver.model() if answer == z3.sat else None
            reason = solver.reason_unknown() if answer == z3.unknown else ""
            solver.pop()
            if answer == z3.unknown:
                raise Unknown(reason)
            if model is not None:
                return Obligation(name, text, False, read_state(self.ts, model, self.s), page,
                                  model.eval(self.pos, model_completion=True).as_long())
        return Obligation(name, text, True)

    def obligations(self) -> Iterator[Obligation]:
        """Every obligation of every object with recovery paths, in spec order."""
        lookup = self.ts.spec.lookup
        for obj, paths in lookup.recovery.items():
            yield from self.object_obligations(obj, paths, lookup.needed.get(obj), lookup.ready.get(obj))

    def object_obligations(self, obj: str, paths: dict[str, Any], needed: Any, ready: Any) -> Iterator[Obligation]:
        """Disjointness of each pair of ``obj``'s paths, exhaustiveness, and in_place == ready."""

        def need(page: int) -> Any:
            return self._term(needed, page) if needed is not None else z3.BoolVal(True)

        def path(name: str) -> Any:
            return lambda page: self._term(paths[name], page)

        names = list(paths)
        for a, b in combinations(names, 2):
            yield self._witness(f"{obj}: {a} / {b} disjoint", f"{render(paths[a])}  vs  {render(paths[b])}",
                                [need, path(a), path(b)])
        yield self._witness(f"{obj}: paths exhaustive", " or ".join(names),
                            [need, lambda page: z3.Not(z3.Or([path(n)(page) for n in names]))])
        if ready is not None and "in_place" in paths:
            yield self._witness(f"{obj}: in_place iff ready", f"{render(paths['in_place'])}  ==  {render(ready)}",
                                [need, lambda page: path("in_place")(page) != self._term(ready, page)])
