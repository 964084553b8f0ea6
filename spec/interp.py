"""Compile IR expressions to Python closures: the runtime's guards and the constant folder.

A compiled expression takes ``names`` (scalars: constants, system variables and states, event
arguments, bound pages and readers) and ``arrays`` (indexed variables and states: ``arrays[x][p]``
per page, ``arrays[x][r]`` per reader, ``arrays[x][(r, p)]`` per reader and page) and returns an
int, a bool or a state name.  A reduction ranges over ``names[domain]`` (``pages`` or ``readers``
as written): a count (ids ``0..n-1``), any iterable of ids, or a callable taking the names and
returning one (a domain that depends on the bound reader or page, e.g. the pages a reader touches).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from .expr import (
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

Names = Mapping[str, Any]
Arrays = Mapping[str, Any]  # per name: a sequence (by page or reader id) or a mapping (by (r, p))
Compiled = Callable[[Names, Arrays], Any]

_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": operator.floordiv,
    "%": operator.mod,
}
_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def compile_expr(e: Expr) -> Compiled:  # noqa: C901 - one case per node kind
    """Return a closure evaluating ``e`` on ``(names, arrays)``."""
    if isinstance(e, Const):
        value = e.value
        return lambda n, a: value
    if isinstance(e, Name):
        key = e.name
        return lambda n, a: n[key]
    if isinstance(e, Index):
        arr = e.name
        if len(e.args) == 1:
            idx = compile_expr(e.args[0])
            return lambda n, a: a[arr][idx(n, a)]
        keys = [compile_expr(x) for x in e.args]
        return lambda n, a: a[arr][tuple(k(n, a) for k in keys)]
    if isinstance(e, Unary):
        inner = compile_expr(e.operand)
        if e.op == "not":
            return lambda n, a: not inner(n, a)
        return lambda n, a: -inner(n, a)
    if isinstance(e, Binary):
        fn, lhs, rhs = _ARITH[e.op], compile_expr(e.left), compile_expr(e.right)
        return lambda n, a: fn(lhs(n, a), rhs(n, a))
    if isinstance(e, Compare):
        cmp, lhs, rhs = _CMP[e.op], compile_expr(e.left), compile_expr(e.right)
        return lambda n, a: cmp(lhs(n, a), rhs(n, a))
    if isinstance(e, InSet):
        item = compile_expr(e.item)
        opts = [compile_expr(o) for o in e.options]
        if e.negated:
            return lambda n, a: all(item(n, a) != o(n, a) for o in opts)
        return lambda n, a: any(item(n, a) == o(n, a) for o in opts)
    if isinstance(e, BoolOp):
        parts = [compile_expr(v) for v in e.values]
        if e.op == "and":
            return lambda n, a: all(part(n, a) for part in parts)
        return lambda n, a: any(part(n, a) for part in parts)
    if isinstance(e, Implies):
        lhs, rhs = compile_expr(e.left), compile_expr(e.right)
        return lambda n, a: (not lhs(n, a)) or bool(rhs(n, a))
    if isinstance(e, IfExp):
        cond, then, other = compile_expr(e.cond), compile_expr(e.then), compile_expr(e.other)
        return lambda n, a: then(n, a) if cond(n, a) else other(n, a)
    if isinstance(e, Reduce):
        return _compile_reduce(e)
    raise TypeError(f"not an expression node: {e!r}")


def _compile_reduce(e: Reduce) -> Compiled:
    body, var, domain = compile_expr(e.body), e.var, e.domain

    def values(n: Names, a: Arrays) -> Any:
        scope = dict(n)
        ids = n[domain]
        if callable(ids):
            ids = ids(n)
        for q in (range(ids) if isinstance(ids, int) else ids):
            scope[var] = q
            yield body(scope, a)

    if e.kind == "all":
        return lambda n, a: all(values(n, a))
    if e.kind == "any":
        return lambda n, a: any(values(n, a))
    return lambda n, a: sum(int(v) for v in values(n, a))


def evaluate(e: Expr, names: Names, arrays: Arrays | None = None) -> Any:
    """Evaluate ``e`` once (for constant folding and one-off checks)."""
    return compile_expr(e)(names, arrays or {})
