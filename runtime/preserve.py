"""Pointwise preservation proofs: does firing an event keep one of its own quantified conjuncts true?

A batch fires one event for the same reader on several pages in order (``attach`` over a leased
prefix).  A conjunct such as ``next_block_free(r)``::

    all(implies(block[r, q] == 'in', depth[q] * C < frontier[r]) for q in pages)

reads what the earlier firings of the batch write (``block[r, p]``, ``frontier[r]``), so its value at
the k-th firing is not its value before the batch.  If firing the event *preserves* the conjunct
(true before a firing whose whole guard holds => true after it), it holds at every firing of the
batch once it holds before the first, and the batch needs to evaluate it once.

The proof is pointwise and does not depend on the number of pages: for a symbolic state ``s``, the
state ``t`` the event reaches from it for symbolic ``r`` and ``p``, and a symbolic element ``i``::

    guard(s) without its reductions  and  body(s, i)   implies   body(t, i)

is checked with Z3 (valid iff its negation is unsatisfiable).  Arrays are uninterpreted functions; an
effect updates one point (``If(i == p, value, old)``).  Anything the encoding does not cover (a
nested reduction, a '*' effect) answers "not preserved", which only costs speed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import z3

from morphcache.spec.expr import (
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

from .compiler import CompiledEvent, CompiledSpec


class Unsupported(Exception):
    """The expression is outside what the pointwise encoding covers."""


class _State:
    """Uninterpreted functions for every design name of one symbolic state."""

    def __init__(self, cspec: CompiledSpec, tag: str) -> None:
        self.cspec = cspec
        self.fns: dict[str, Callable[..., Any]] = {}
        for name, scope in cspec.scopes.items():
            decl = cspec.spec.vars.get(name)
            sort = z3.BoolSort() if decl is not None and decl.type == "bool" else z3.IntSort()
            dims = [z3.IntSort()] * (2 if scope == "reader_page" else 1)
            fn = z3.Function(f"{name}@{tag}", *dims, sort)
            self.fns[name] = fn


def _term(e: Expr, st: Mapping[str, Callable[..., Any]], env: Mapping[str, Any]) -> Any:  # noqa: C901
    if isinstance(e, Const):
        if isinstance(e.value, bool):
            return z3.BoolVal(e.value)
        if isinstance(e.value, int):
            return z3.IntVal(e.value)
        raise Unsupported(f"constant {e.value!r}")
    if isinstance(e, Name):
        if e.name not in env:
            raise Unsupported(f"name {e.name}")
        return env[e.name]
    if isinstance(e, Index):
        return st[e.name](*[_term(a, st, env) for a in e.args])
    if isinstance(e, Unary):
        inner = _term(e.operand, st, env)
        return z3.Not(inner) if e.op == "not" else -inner
    if isinstance(e, Binary):
        lhs, rhs = _term(e.left, st, env), _term(e.right, st, env)
        return {"+": lambda: lhs + rhs, "-": lambda: lhs - rhs, "*": lambda: lhs * rhs,
                "//": lambda: lhs / rhs, "%": lambda: lhs % rhs}[e.op]()
    if isinstance(e, Compare):
        lhs, rhs = _term(e.left, st, env), _term(e.right, st, env)
        return {"==": lambda: lhs == rhs, "!=": lambda: lhs != rhs, "<": lambda: lhs < rhs,
                "<=": lambda: lhs <= rhs, ">": lambda: lhs > rhs, ">=": lambda: lhs >= rhs}[e.op]()
    if isinstance(e, InSet):
        item = _term(e.item, st, env)
        opts = [item == _term(o, st, env) for o in e.options]
        return z3.Not(z3.Or(opts)) if e.negated else z3.Or(opts)
    if isinstance(e, BoolOp):
        parts = [_term(v, st, env) for v in e.values]
        return z3.And(parts) if e.op == "and" else z3.Or(parts)
    if isinstance(e, Implies):
        return z3.Implies(_term(e.left, st, env), _term(e.right, st, env))
    if isinstance(e, IfExp):
        return z3.If(_term(e.cond, st, env), _term(e.then, st, env), _term(e.other, st, env))
    if isinstance(e, Reduce):
        raise Unsupported("nested reduction")
    raise Unsupported(type(e).__name__)


def _post(cspec: CompiledSpec, ev: CompiledEvent, s: _State, env: Mapping[str, Any]) -> dict[str, Callable[..., Any]]:
    """Functions of the state after ``ev`` fires from ``s`` (one point updated per write)."""
    r, p = env.get("r"), env.get("p")
    updates: dict[str, tuple[tuple[Any, ...], Any]] = {}
    owner_at = {"page": (p,), "reader": (r,)}.get(ev.scope, (r, p))
    updates[ev.owner] = (owner_at, z3.IntVal(ev.target))
    for eff in ev.effects:
        if eff.star is not None:
            raise Unsupported("'*' effect")
        at = tuple(r if part == "r" else p for part in eff.index.split(","))
        updates[eff.target] = (at, _term(eff.expr, s.fns, env))
    out: dict[str, Callable[..., Any]] = dict(s.fns)
    for name, (at, value) in updates.items():
        old = s.fns[name]

        def fn(*idx: Any, _old: Any = old, _at: tuple[Any, ...] = at, _value: Any = value) -> Any:
            return z3.If(z3.And([a == b for a, b in zip(idx, _at, strict=True)]), _value, _old(*idx))

        out[name] = fn
    return out


def preserved(cspec: CompiledSpec, ev: CompiledEvent, conjunct: Expr, other_pages_only: bool = False) -> bool:
    """Whether ``ev`` keeps ``conjunct`` (an ``all`` reduction, or a tracked name for one) true whenever
    its guard held; ``other_pages_only``: only the body at pages other than the event's own."""
    if isinstance(conjunct, Name) and conjunct.name in cspec.tracked:
        conjunct = cspec.tracked[conjunct.name]
    if not isinstance(conjunct, Reduce) or conjunct.kind != "all":
        return False
    try:
        s = _State(cspec, "s")
        env: dict[str, Any] = {"r": z3.Int("r"), "p": z3.Int("p"), "pages": z3.Int("pages")}
        for name in cspec.aggregates:
            env[name] = z3.Int(name)
        i = z3.Int("i")
        facts = []
        for c in ev.conjuncts:
            if any(isinstance(n, Reduce) or (isinstance(n, Name) and n.name in cspec.tracked) for n in _nodes(c.expr)):
                continue
            facts.append(_term(c.expr, s.fns, env))
        inner = {**env, conjunct.var: i}
        if other_pages_only and ev.takes_page:
            facts.append(i != env["p"])
        facts.append(_term(conjunct.body, s.fns, inner))
        t = _post(cspec, ev, s, env)
        goal = _term(conjunct.body, t, inner)
    except Unsupported:
        return False
    solver = z3.Solver()
    solver.set("timeout", 2000)
    solver.add(*facts, z3.Not(goal))
    return solver.check() == z3.unsat


def _nodes(e: Expr) -> list[Expr]:
    from morphcache.spec.expr import walk

    return list(walk(e))
