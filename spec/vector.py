"""Compile IR expressions to numpy operations over many bindings at once: the vector backend.

The same expression trees as :mod:`spec.interp` (the closure backend), evaluated column-wise.  A
compiled expression takes ``names`` and ``arrays`` like a closure, except that a name may be bound to
a numpy array: one value per binding (``p`` bound to 2,048 page ids evaluates a guard for 2,048
pages in one pass).  ``arrays[x]`` is anything numpy-indexable: ``arrays[x][ids]`` (per page or per
reader) and ``arrays[x][rids, pids]`` (per reader and page) with index arrays of any broadcastable
shape.  The result is a numpy array over the bindings (or a plain scalar when nothing was batched).

A reduction adds an axis::

    names   p = [3, 7, 9]                          shape (3,)        depth 1
    all(block[s, p] == 'out' for s in readers)     s = [[0, 1]]      shape (1, 2)      depth 2
                                                   body              shape (3, 2)
                                                   all over axis -1  shape (3,)

Its domain is ``names[domain]``: a count (ids ``0..n-1``), an iterable of ids, or a callable taking
the names and returning one (a domain that depends on a batched name receives the array and returns
ids covering every binding).  Domains are never numpy arrays in ``names`` (numpy arrays there are
batched values).  A callable domain may also say each binding's own ids (``per_binding``: its ``pairs``
gives the binding of each pair and the pair's id); one level deep, the body is then evaluated once per
pair instead of once per binding and id of the union, and reduced per binding::

    p = [3, 7, 9]       readers holding each:  3: {0}   7: {}   9: {0, 4}
    pairs               at = [0, 2, 2]   s = [0, 0, 4]          body over 3 pairs, not 3 x 2
    all                 binding i is False where a pair of i is False

which is the closure backend's reading exactly (each binding over its own domain).

Both branches of ``and``/``or``/``if`` are evaluated everywhere (no short circuit), so an expression
must be total on every binding, as every spec expression indexing by ``p``, ``r``, ``q`` and ``s`` is.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

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
Arrays = Mapping[str, Any]
VecCompiled = Callable[[Names, Arrays], Any]
DEPTH = "@depth"  # names key: how many axes the batched values carry (set on entering a reduction)

_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": np.floor_divide,
    "%": np.mod,
}
_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "==": np.equal,
    "!=": np.not_equal,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}


def compile_vector(e: Expr) -> VecCompiled:  # noqa: C901 - one case per node kind
    """Return a function evaluating ``e`` on ``(names, arrays)`` for every binding at once."""
    if isinstance(e, Const):
        value = e.value
        return lambda n, a: value
    if isinstance(e, Name):
        key = e.name
        return lambda n, a: n[key]
    if isinstance(e, Index):
        arr = e.name
        if len(e.args) == 1:
            idx = compile_vector(e.args[0])
            return lambda n, a: a[arr][idx(n, a)]
        keys = [compile_vector(x) for x in e.args]
        return lambda n, a: a[arr][tuple(k(n, a) for k in keys)]
    if isinstance(e, Unary):
        inner = compile_vector(e.operand)
        if e.op == "not":
            return lambda n, a: np.logical_not(inner(n, a))
        return lambda n, a: np.negative(inner(n, a))
    if isinstance(e, Binary):
        fn, lhs, rhs = _ARITH[e.op], compile_vector(e.left), compile_vector(e.right)
        return lambda n, a: fn(lhs(n, a), rhs(n, a))
    if isinstance(e, Compare):
        cmp = _CMP[e.op]
        if isinstance(e.right, Const) and _plain(e.right.value):  # x[p] == 'gpu' (a state code)
            lhs, const = compile_vector(e.left), np.array(e.right.value)
            return lambda n, a: cmp(lhs(n, a), const)
        lhs, rhs = compile_vector(e.left), compile_vector(e.right)
        return lambda n, a: cmp(lhs(n, a), rhs(n, a))
    if isinstance(e, InSet):
        return _compile_inset(e)
    if isinstance(e, BoolOp):
        parts = [compile_vector(v) for v in e.values]
        combine = np.logical_and if e.op == "and" else np.logical_or
        return lambda n, a: functools.reduce(combine, [part(n, a) for part in parts])
    if isinstance(e, Implies):
        lhs, rhs = compile_vector(e.left), compile_vector(e.right)
        return lambda n, a: np.logical_or(np.logical_not(lhs(n, a)), rhs(n, a))
    if isinstance(e, IfExp):
        cond, then, other = compile_vector(e.cond), compile_vector(e.then), compile_vector(e.other)
        return lambda n, a: _where(cond(n, a), then(n, a), other(n, a))
    if isinstance(e, Reduce):
        return _compile_reduce(e)
    raise TypeError(f"not an expression node: {e!r}")


def _compile_inset(e: InSet) -> VecCompiled:
    item = compile_vector(e.item)
    opts = [compile_vector(o) for o in e.options]
    values = [o.value for o in e.options if isinstance(o, Const) and _plain(o.value)]
    if len(values) == len(e.options):  # constants (state codes)
        consts = [np.array(v) for v in values]
        if e.negated:
            return lambda n, a: np.logical_not(one_of(item(n, a), consts))
        return lambda n, a: one_of(item(n, a), consts)
    if e.negated:
        return lambda n, a: _fold(np.logical_and, [np.not_equal(v, o(n, a)) for v in [item(n, a)] for o in opts])
    return lambda n, a: one_of(item(n, a), [o(n, a) for o in opts])


def _plain(value: Any) -> bool:
    """An int constant (a state code, a number; not a bool): compared as a 0-d array, which numpy
    compares without converting a Python scalar each time (the result is the same)."""
    return isinstance(value, int) and not isinstance(value, bool)


def one_of(values: Any, options: Iterable[Any]) -> Any:
    """Where ``values`` equals one of ``options`` (a few: one comparison each, cheaper than np.isin)."""
    return _fold(np.logical_or, [np.equal(values, o) for o in options])


def _fold(fn: Callable[[Any, Any], Any], values: list[Any]) -> Any:
    return functools.reduce(fn, values)


def _where(cond: Any, then: Any, other: Any) -> Any:
    if isinstance(cond, np.ndarray) or isinstance(then, np.ndarray) or isinstance(other, np.ndarray):
        return np.where(cond, then, other)
    return then if cond else other


def _depth(n: Names) -> int:
    depth = n.get(DEPTH)
    if depth is not None:
        return int(depth)
    return max((v.ndim for v in n.values() if isinstance(v, np.ndarray)), default=0)


def domain_ids(n: Names, domain: str) -> np.ndarray:
    """The ids a reduction over ``domain`` ranges over, as an int64 array."""
    ids = n[domain]
    if callable(ids):
        ids = ids(n)
    if isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):
        return np.arange(int(ids), dtype=np.int64)
    if isinstance(ids, np.ndarray):
        return ids.astype(np.int64, copy=False).reshape(-1)
    return np.fromiter(ids, dtype=np.int64)


PAIRS = "pairs"  # the attribute of a callable domain that gives each binding's own ids (``per_binding``)
Pairs = Callable[[Names], "tuple[int, np.ndarray, np.ndarray] | None"]


def per_binding(ids: Callable[[Names], Iterable[int]], pairs: Pairs) -> Callable[[Names], Iterable[int]]:
    """``ids`` (a callable domain) that also says each binding's own ids: ``pairs(names)`` returns
    ``(bindings, at, ids)`` (pair ``k`` is id ``ids[k]`` of binding ``at[k]``; the union need not be
    taken), or None where it cannot (then ``ids`` is asked)."""
    setattr(ids, PAIRS, pairs)
    return ids


def _compile_reduce(e: Reduce) -> VecCompiled:
    body, var, domain, kind = compile_vector(e.body), e.var, e.domain, e.kind

    def run(n: Names, a: Arrays) -> Any:
        depth = _depth(n)
        if depth == 1:
            pairs = getattr(n[domain], PAIRS, None)
            found = pairs(n) if pairs is not None else None
            if found is not None:
                return _reduce_pairs(body, var, kind, n, a, found)
        ids = domain_ids(n, domain)
        inner: dict[str, Any] = {k: (v[..., None] if isinstance(v, np.ndarray) else v) for k, v in n.items()}
        inner[var] = ids.reshape((1,) * depth + (len(ids),))
        inner[DEPTH] = depth + 1
        value = np.asarray(body(inner, a))
        if value.ndim < depth + 1:
            value = value.reshape((1,) * (depth + 1 - value.ndim) + value.shape)
        value = np.broadcast_to(value, value.shape[:-1] + (len(ids),))
        if kind == "all":
            out = np.all(value, axis=-1)
        elif kind == "any":
            out = np.any(value, axis=-1)
        else:
            out = np.sum(value.astype(np.int64), axis=-1)
        return out if depth else out.reshape(()).item()

    return run


def _reduce_pairs(body: VecCompiled, var: str, kind: str, n: Names, a: Arrays,
                  found: tuple[int, np.ndarray, np.ndarray]) -> np.ndarray:
    """A reduction one level deep evaluated at its pairs (``per_binding``), reduced per binding."""
    bindings, at, ids = found
    if not len(at):  # no binding has an id: every one neutral
        return np.full(bindings, kind == "all") if kind != "sum" else np.zeros(bindings, dtype=np.int64)
    inner: dict[str, Any] = {k: (v[at] if isinstance(v, np.ndarray) else v) for k, v in n.items()}
    inner[var] = ids
    inner[DEPTH] = 1
    value = np.broadcast_to(np.asarray(body(inner, a)), (len(at),))
    if kind == "all":
        out = np.ones(bindings, dtype=bool)
        out[at[np.logical_not(value)]] = False
        return out
    if kind == "any":
        out = np.zeros(bindings, dtype=bool)
        out[at[value.astype(bool)]] = True
        return out
    out = np.zeros(bindings, dtype=np.int64)
    np.add.at(out, at, value.astype(np.int64))
    return out


def evaluate_vector(e: Expr, names: Names, arrays: Arrays | None = None) -> Any:
    """Evaluate ``e`` once with the vector backend."""
    return compile_vector(e)(names, arrays or {})
