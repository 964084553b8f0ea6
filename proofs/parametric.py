"""Proofs for every instance size: symbolic page and reader counts, quantified invariants.

The other methods check one instance (3 pages, 2 readers).  Here the numbers of pages ``P`` and
readers ``R`` are symbolic (any ``P, R >= 1``), and optionally the constants too (``C >= 1``,
``W >= 0``, ``CAPACITY >= 0``, ``MAX_PIN >= 1``: every constant at least 0, the page size and the pin
limit at least 1).  A per-page variable is an array indexed by page, a per-(reader, page) one an array
of arrays; ``all``/``any`` over pages or readers are quantifiers over ``0 <= q < P``.

Houdini runs as for one instance, one query per candidate and event: ``J(s) and T_e(s, t) and not
c(t)``.  The queries are made quantifier-free by instantiation, which only weakens their premises, so
an unsatisfiable query is a proof:

* an existential (``not all(...)`` in the goal, ``any(...)`` in a guard) becomes a fresh index, which
  joins the pool of indexes;
* a universal (``all(...)`` in an invariant or a guard, the bounds of every array element) is
  instantiated at every index of the pool: the event's reader and page and those fresh indexes.

A satisfiable query may be spurious (an instantiation missing): the candidate is dropped, not
refuted; a dropped candidate is never reported PROVED.  A sum over a symbolic domain is carried as
derived state (:mod:`proofs.aggregates`), with the facts every sum of non-negative terms obeys (each
term between 0 and the sum); a sum without an aggregate is any integer in a guard or an effect (more
behaviours, still sound) and keeps a property from being attempted.  A step property is attempted as
the invariant "whenever its event is enabled, its expression holds" (stronger, so its proof proves
it); events with params are not.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import z3

from morphcache.spec.expr import (
    READERS,
    Binary,
    BoolOp,
    Compare,
    Const,
    Expr,
    IfExp,
    Implies,
    Index,
    InSet,
    Name,
    Reduce,
    Unary,
)
from morphcache.spec.model import SCOPE_ARGS, Event, Property, Spec

from .aggregates import Aggregate, collect, shape, spec_expressions
from .definedness import whenever_enabled
from .slicing import Bounds
from .terms import floor_div

_ARITH: dict[str, Callable[[Any, Any], Any]] = {"+": operator.add, "-": operator.sub, "*": operator.mul,
                                                  "//": floor_div, "%": lambda a, b: a - b * floor_div(a, b)}
_CMP: dict[str, Callable[[Any, Any], Any]] = {"==": operator.eq, "!=": operator.ne, "<": operator.lt,
                                                "<=": operator.le, ">": operator.gt, ">=": operator.ge}


class Unsupported(Exception):
    """An expression without a parametric encoding (a sum over a symbolic domain, a quantifier under
    a comparison, an event param)."""


@dataclass
class Pool:
    """Index terms that universals are instantiated at, and the facts about fresh indexes."""

    pages: list[Any] = field(default_factory=list)
    readers: list[Any] = field(default_factory=list)
    facts: list[Any] = field(default_factory=list)

    def of(self, domain: str) -> list[Any]:
        return self.readers if domain == READERS else self.pages


@dataclass(frozen=True)
class ParametricResult:
    """Candidates proved for every instance size, those dropped, those not attempted (and why)."""

    proved: tuple[str, ...]
    dropped: tuple[str, ...]
    skipped: dict[str, str]
    symbolic_constants: bool
    seconds: float


class Parametric:
    """The spec with symbolic sizes, and Houdini over it."""

    def __init__(self, spec: Spec, symbolic_constants: bool = False, timeout_ms: int = 10_000) -> None:
        self.spec = spec
        self.symbolic = symbolic_constants
        self.timeout_ms = timeout_ms
        self.P, self.R = z3.Int("pages"), z3.Int("readers")  # reserved names: no spec constant shares them
        self.side = [self.P >= 1, self.R >= 1]
        self.consts: dict[str, Any] = {"pages": self.P, "readers": self.R}
        for name, value in spec.constants.items():
            if symbolic_constants:
                c = z3.Int(name)
                self.consts[name] = c
                self.side.append(c >= (1 if name in ("C", "MAX_PIN") else 0))
            else:
                self.consts[name] = z3.IntVal(value)
        self.names = [*spec.vars, *spec.objects]
        self._fresh = itertools.count()
        self.aggregates = collect(spec, spec_expressions(spec))
        self.bounds = Bounds(spec)

    # -- states ------------------------------------------------------------------------------
    def state(self, tag: str) -> dict[str, Any]:
        """One array (or scalar) per variable and object."""
        s: dict[str, Any] = {}
        for n in self.names:
            sort: Any = z3.IntSort() if n in self.spec.objects or self.spec.vars[n].type == "int" else z3.BoolSort()
            for _ in SCOPE_ARGS[self.spec.scope_of(n)]:
                sort = z3.ArraySort(z3.IntSort(), sort)
            s[n] = z3.Const(f"{n}@{tag}", sort)
        for agg in self.aggregates.values():
            sort = z3.IntSort()
            for _ in agg.dims:
                sort = z3.ArraySort(z3.IntSort(), sort)
            s[agg.key] = z3.Const(f"{agg.key}@{tag}", sort)
        return s

    def fresh(self, kind: str) -> Any:
        return z3.Int(f"{kind}!{next(self._fresh)}")

    def in_range(self, i: Any, dim: str) -> Any:
        return z3.And(i >= 0, i < (self.R if dim == "r" else self.P))

    # -- expressions ---------------------------------------------------------------------------
    def term(self, e: Expr, s: dict[str, Any], env: dict[str, Any], pool: Pool, pol: bool | None,  # noqa: C901
             obj: str | None = None, havoc: bool = False) -> Any:
        """Z3 for ``e``; ``pol``: True where ``e`` is asserted, False where its negation is, None where
        neither (no quantifier may be instantiated there)."""
        if isinstance(e, Const):
            if isinstance(e.value, str):
                assert obj is not None
                return z3.IntVal(self.spec.objects[obj].states.index(e.value))
            return z3.BoolVal(e.value) if isinstance(e.value, bool) else z3.IntVal(e.value)
        if isinstance(e, Name):
            if e.name in env:
                return env[e.name]
            if e.name in self.consts:
                return self.consts[e.name]
            return s[e.name]
        if isinstance(e, Index):
            a = s[e.name]
            for arg in e.args:
                a = z3.Select(a, self.term(arg, s, env, pool, None))
            return a
        if isinstance(e, Unary):
            inner = self.term(e.operand, s, env, pool, None if pol is None else not pol)
            return z3.Not(inner) if e.op == "not" else -inner
        if isinstance(e, Binary):
            return _ARITH[e.op](self.term(e.left, s, env, pool, None, havoc=havoc),
                                self.term(e.right, s, env, pool, None, havoc=havoc))
        if isinstance(e, Compare):
            o = _object(e.left, self.spec) or _object(e.right, self.spec)
            return _CMP[e.op](self.term(e.left, s, env, pool, None, o, havoc),
                              self.term(e.right, s, env, pool, None, o, havoc))
        if isinstance(e, InSet):
            o = _object(e.item, self.spec)
            item = self.term(e.item, s, env, pool, None, o)
            member = z3.Or([item == self.term(x, s, env, pool, None, o) for x in e.options])
            return z3.Not(member) if e.negated else member
        if isinstance(e, BoolOp):
            parts = [self.term(v, s, env, pool, pol, havoc=havoc) for v in e.values]
            return z3.And(parts) if e.op == "and" else z3.Or(parts)
        if isinstance(e, Implies):
            return z3.Implies(self.term(e.left, s, env, pool, None if pol is None else not pol, havoc=havoc),
                              self.term(e.right, s, env, pool, pol, havoc=havoc))
        if isinstance(e, IfExp):
            return z3.If(self.term(e.cond, s, env, pool, None, havoc=havoc),
                         self.term(e.then, s, env, pool, pol, obj, havoc),
                         self.term(e.other, s, env, pool, pol, obj, havoc))
        if isinstance(e, Reduce):
            return self.reduce(e, s, env, pool, pol, havoc)
        raise TypeError(f"not an expression node: {e!r}")

    def reduce(self, e: Reduce, s: dict[str, Any], env: dict[str, Any], pool: Pool, pol: bool | None,
               havoc: bool) -> Any:
        dim = "r" if e.domain == READERS else "p"
        if e.kind == "sum":
            found = shape(self.spec, e)
            if found is not None and found[0] in self.aggregates and s:
                value = s[self.aggregates[found[0]].key]
                for name in found[1]:
                    value = z3.Select(value, env[name])
                return value
            if havoc:
                return self.fresh("sum")  # any integer: an over-approximation of the behaviours
            raise Unsupported("a sum over a symbolic domain")
        universal = (e.kind == "all") == bool(pol)
        if pol is None:
            raise Unsupported("a quantifier in a position that is neither asserted nor denied")
        if universal:
            items = [z3.Implies(self.in_range(i, dim), self.term(e.body, s, {**env, e.var: i}, pool, pol, havoc=havoc))
                     if e.kind == "all" else
                     z3.And(self.in_range(i, dim), self.term(e.body, s, {**env, e.var: i}, pool, pol, havoc=havoc))
                     for i in list(pool.of(e.domain))]
            return z3.And(items) if e.kind == "all" else z3.Or(items)
        witness = self.fresh(e.var)
        pool.of(e.domain).append(witness)
        pool.facts.append(self.in_range(witness, dim))
        body = self.term(e.body, s, {**env, e.var: witness}, pool, pol, havoc=havoc)
        return z3.And(self.in_range(witness, dim), body) if e.kind == "any" else \
            z3.Implies(self.in_range(witness, dim), body)

    # -- system --------------------------------------------------------------------------------
    def domain(self, s: dict[str, Any], pool: Pool) -> Any:
        """Every element of every array in its bounds, at every index of the pool."""
        parts = []
        for n in self.names:
            dims = SCOPE_ARGS[self.spec.scope_of(n)]
            for combo in itertools.product(*[pool.of(READERS if d == "r" else "pages") for d in dims]):
                x = s[n]
                for i in combo:
                    x = z3.Select(x, i)
                bound = self._bound(n, x)
                if bound is not None:
                    rng = [self.in_range(i, d) for i, d in zip(combo, dims, strict=True)]
                    parts.append(z3.Implies(z3.And(rng), bound) if rng else bound)
        return z3.And(parts)

    def _bound(self, n: str, x: Any) -> Any:
        if n in self.spec.objects:
            return z3.And(x >= 0, x < len(self.spec.objects[n].states))
        decl = self.spec.vars[n]
        parts = []
        empty = Pool()
        if decl.min_expr is not None:
            parts.append(x >= self.term(decl.min_expr, {}, {}, empty, None))
        if decl.max_expr is not None:
            parts.append(x <= self.term(decl.max_expr, {}, {}, empty, None))
        return z3.And(parts) if parts else None

    def init(self, s: dict[str, Any]) -> Any:
        parts = []
        initial: dict[str, Any] = {}
        for n in self.names:
            if n in self.spec.objects:
                v: Any = z3.IntVal(self.spec.objects[n].states.index(self.spec.objects[n].initial))
            else:
                iv = self.spec.vars[n].init
                v = z3.BoolVal(iv) if isinstance(iv, bool) else z3.IntVal(iv)
            for _ in SCOPE_ARGS[self.spec.scope_of(n)]:
                v = z3.K(z3.IntSort(), v)
            parts.append(s[n] == v)
            initial[n] = v
        for agg in self.aggregates.values():  # every term of the sum has the body's initial value
            env = {agg.node.var: self.fresh("v"), **{name: self.fresh("i") for name in agg.free}}
            body = self.term(agg.node.body, initial, env, Pool(), None)
            count = self.R if agg.node.domain == READERS else self.P
            total: Any = count * z3.simplify(_as_int(body))
            for _ in agg.dims:
                total = z3.K(z3.IntSort(), total)
            parts.append(s[agg.key] == total)
        return z3.And(parts)

    def step(self, ev: Event, s: dict[str, Any], t: dict[str, Any], env: dict[str, Any], pool: Pool) -> Any:
        """``ev`` fires from ``s`` to ``t`` for the reader and page in ``env`` (each param a fresh
        integer within its bounds at this system's constants)."""
        env = dict(env)
        bounds: list[Any] = []
        for prm in ev.params:
            env[prm.name] = v = self.fresh(prm.name)
            lo = self.term(prm.min_expr, s, {}, pool, None) if prm.min_expr is not None else prm.min
            hi = self.term(prm.max_expr, s, {}, pool, None) if prm.max_expr is not None else prm.max
            bounds += [v >= lo, v <= hi]
        dims = SCOPE_ARGS[ev.scope]
        owner = s[ev.owner]
        for d in dims:
            owner = z3.Select(owner, env[d])
        states = self.spec.objects[ev.owner].states
        parts = [self.in_range(env[a], a) for a in ev.args] + bounds
        parts.append(z3.Or([owner == states.index(x) for x in ev.sources]))
        parts.append(self.term(ev.guard, s, env, pool, True, havoc=True))
        new = {ev.owner: self._write(s[ev.owner], list(dims), list(dims), env, lambda _b: z3.IntVal(
            states.index(ev.target)))}
        for eff in ev.effects:
            obj = eff.target if eff.target in self.spec.objects else None
            tdims = list(SCOPE_ARGS[self.spec.scope_of(eff.target)])
            index = eff.index.split(",") if eff.index else []

            def value(bound: dict[str, Any], eff: Any = eff, obj: str | None = obj) -> Any:
                return self.term(eff.value, s, {**env, **bound}, pool, None, obj, havoc=True)

            new[eff.target] = self._write(new.get(eff.target, s[eff.target]), tdims, index, env, value)
        parts += [t[n] == new.get(n, s[n]) for n in self.names]
        writes = [(ev.owner, [env[d] for d in dims])]
        writes += [(eff.target, [env[part] if part in env else None for part in (eff.index.split(",") if eff.index
                                                                                else [])]) for eff in ev.effects]
        for agg in self.aggregates.values():
            updated = self._aggregate(agg, writes, s, t)
            if updated is not None:
                parts.append(t[agg.key] == updated)
        return z3.And(parts)

    def _aggregate(self, agg: Aggregate, writes: list[tuple[str, list[Any]]], s: dict[str, Any],
                   t: dict[str, Any]) -> Any:
        """The aggregate after the writes (see :mod:`proofs.aggregates`), or None: unconstrained."""
        at: dict[str, Any] | None = None
        for var, index in writes:
            for read, names in agg.reads:
                if read != var:
                    continue
                if not names or len(names) != len(index) or any(i is None for i in index):
                    return None  # a system variable or a * write: every term may change
                here = dict(zip(names, index, strict=True))
                if agg.node.var not in here:
                    return None  # a write that changes the term of every bound value
                if at is None:
                    at = here
                elif set(at) != set(here) or any(not z3.eq(at[k], here[k]) for k in at):
                    return None  # writes at different elements
        if at is None:
            return s[agg.key]
        before = _as_int(self.term(agg.node.body, s, at, Pool(), None))
        after = _as_int(self.term(agg.node.body, t, at, Pool(), None))
        return self._bump(s[agg.key], [at[name] for name in agg.free], after - before)

    def sum_facts(self, s: dict[str, Any], pool: Pool) -> list[Any]:
        """What holds of every sum of non-negative terms: each term lies between 0 and the sum (at the
        indexes of the pool).  True of the real sums, so sound to assume of the aggregates."""
        out = []
        for agg in self.aggregates.values():
            if self.bounds.interval(agg.node.body)[0] < 0 and not _counts(agg.node.body):
                continue
            domains = [READERS if d == "r" else "pages" for d in agg.dims]
            bound_domain = agg.node.domain
            for v in list(pool.of(bound_domain)):
                for combo in itertools.product(*[list(pool.of(d)) for d in domains]):
                    env = {agg.node.var: v, **dict(zip(agg.free, combo, strict=True))}
                    term = _as_int(self.term(agg.node.body, s, env, Pool(), None))
                    total = s[agg.key]
                    for i in combo:
                        total = z3.Select(total, i)
                    rng = [self.in_range(v, "r" if bound_domain == READERS else "p")]
                    rng += [self.in_range(i, d) for i, d in zip(combo, agg.dims, strict=True)]
                    out.append(z3.Implies(z3.And(rng), z3.And(term >= 0, term <= total)))
        return out

    def _bump(self, arr: Any, index: list[Any], delta: Any) -> Any:
        if not index:
            return arr + delta
        return z3.Store(arr, index[0], self._bump(z3.Select(arr, index[0]), index[1:], delta))

    def _write(self, arr: Any, dims: list[str], index: list[str], env: dict[str, Any],
               value: Callable[[dict[str, Any]], Any], bound: dict[str, Any] | None = None) -> Any:
        bound = bound or {}
        if not dims:
            return value(bound)
        if index[0] == "*":
            i = self.fresh("star")
            inner = self._write(z3.Select(arr, i), dims[1:], index[1:], env, value,
                                {**bound, "s" if dims[0] == "r" else "q": i})
            return z3.Lambda([i], inner)
        i = env[dims[0]]
        return z3.Store(arr, i, self._write(z3.Select(arr, i), dims[1:], index[1:], env, value, bound))

    # -- Houdini -------------------------------------------------------------------------------
    def houdini(self, candidates: Iterable[Property], progress: Callable[[str], None] | None = None
                ) -> ParametricResult:
        """The largest subset of the candidates this method shows initial and inductive for every size."""
        start = time.perf_counter()
        skipped: dict[str, str] = {}
        alive: list[Property] = []
        for c in candidates:
            if c.kind == "step":
                if self.spec.event(str(c.event)).params:
                    skipped[c.name] = "a step property of an event with params"
                    continue
                c = dataclasses.replace(c, kind="invariant", expr=whenever_enabled(self.spec, c))
            try:
                self.term(c.expr, self.state("probe"), {}, Pool([self.fresh("q")], [self.fresh("s")]), True)
            except Unsupported as exc:
                skipped[c.name] = str(exc)
                continue
            if self._initial(c):
                alive.append(c)
            else:
                skipped[c.name] = "not shown to hold initially"
        dropped: list[str] = []
        changed = True
        while changed:
            changed = False
            for c in list(alive):
                for ev in self.spec.events:
                    if not self._preserved(c, ev, alive):
                        if progress:
                            progress(f"parametric: dropping {c.name} ({ev.name})")
                        alive.remove(c)
                        dropped.append(c.name)
                        changed = True
                        break
        return ParametricResult(tuple(c.name for c in alive), tuple(dropped), skipped, self.symbolic,
                                time.perf_counter() - start)

    def _solver(self) -> z3.Solver:
        solver = z3.Solver()
        solver.set("timeout", self.timeout_ms)
        solver.add(*self.side)
        return solver

    def _initial(self, c: Property) -> bool:
        s = self.state("init")
        pool = Pool()
        goal = self.term(c.expr, s, {}, pool, False)
        solver = self._solver()
        solver.add(self.init(s), z3.Not(goal), *pool.facts)
        return bool(solver.check() == z3.unsat)

    def _preserved(self, c: Property, ev: Event, alive: list[Property]) -> bool:
        s, t = self.state("s"), self.state("t")
        env = {"r": self.fresh("r"), "p": self.fresh("p")}
        pool = Pool([env["p"]], [env["r"]])
        try:
            goal = self.term(c.expr, t, {}, pool, False)  # denied: its universals become fresh indexes
            trans = self.step(ev, s, t, env, pool)
        except Unsupported:
            return False
        hyps = [self.term(a.expr, s, {}, pool, True) for a in alive]
        solver = self._solver()
        solver.add(trans, *hyps, self.domain(s, pool), self.domain(t, pool), z3.Not(goal), *pool.facts,
                   *self.sum_facts(s, pool), *self.sum_facts(t, pool))
        return bool(solver.check() == z3.unsat)


def _counts(e: Expr) -> bool:
    """Whether a sum's body is a count (a boolean, or ``1 if c else 0``)."""
    if isinstance(e, IfExp):
        return isinstance(e.then, Const) and isinstance(e.other, Const) and e.then.value in (0, 1) \
            and e.other.value in (0, 1)
    return isinstance(e, (Compare, BoolOp, InSet, Unary, Implies))


def _as_int(x: Any) -> Any:
    """A sum's body counts a boolean as 0 or 1."""
    return z3.If(x, 1, 0) if z3.is_bool(x) else x


def _object(e: Expr, spec: Spec) -> str | None:
    if isinstance(e, (Name, Index)) and e.name in spec.objects:
        return e.name
    if isinstance(e, IfExp):
        return _object(e.then, spec) or _object(e.other, spec)
    return None
