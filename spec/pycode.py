"""Compile IR expressions to Python source, then to one function each: the third backend.

Same contract as :mod:`spec.interp` (``f(names, arrays)``, a reduction ranges over ``names[domain]``:
a count, an iterable of ids, or a callable taking the names), same short-circuit evaluation, same
values; one Python function per expression instead of a tree of closures, so a guard costs one call
and its operators run as bytecode::

    guard   lpin[r, p] > 0 and lgen[r, p] == gen[p]
    source  def _f(n, a):
                return ((a['lpin'][(n['r'], n['p'])] > 0) and (a['lgen'][(n['r'], n['p'])] == a['gen'][n['p']]))

A page or reader bound by a reduction is a local variable of the generator expression; when the
reduction's domain is a callable, it sees the names with the enclosing bound variables added.
"""

from __future__ import annotations

from collections.abc import Iterable
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
from .interp import Compiled, Names


def _ids(n: Names, domain: str, bound: dict[str, Any] | None = None) -> Iterable[int]:
    ids = n[domain]
    if callable(ids):
        ids = ids({**n, **bound} if bound else n)
    return range(ids) if isinstance(ids, int) else ids


class _Source:
    """Python source of one expression; ``bound`` maps reduction variables to their local names."""

    def __init__(self) -> None:
        self.bound: dict[str, str] = {}

    def expr(self, e: Expr) -> str:  # noqa: C901 - one case per node kind
        if isinstance(e, Const):
            return repr(e.value)
        if isinstance(e, Name):
            return self.bound.get(e.name) or f"n[{e.name!r}]"
        if isinstance(e, Index):
            if len(e.args) == 1:
                return f"a[{e.name!r}][{self.expr(e.args[0])}]"
            return f"a[{e.name!r}][({', '.join(self.expr(x) for x in e.args)})]"
        if isinstance(e, Unary):
            return f"(not {self.expr(e.operand)})" if e.op == "not" else f"(-{self.expr(e.operand)})"
        if isinstance(e, (Binary, Compare)):
            return f"({self.expr(e.left)} {e.op} {self.expr(e.right)})"
        if isinstance(e, InSet):
            opts = ", ".join(self.expr(o) for o in e.options)
            return f"({self.expr(e.item)} {'not in' if e.negated else 'in'} ({opts},))"
        if isinstance(e, BoolOp):
            return "bool(" + f" {e.op} ".join(self.expr(v) for v in e.values) + ")"
        if isinstance(e, Implies):
            return f"((not {self.expr(e.left)}) or bool({self.expr(e.right)}))"
        if isinstance(e, IfExp):
            return f"({self.expr(e.then)} if {self.expr(e.cond)} else {self.expr(e.other)})"
        if isinstance(e, Reduce):
            return self._reduce(e)
        raise TypeError(f"not an expression node: {e!r}")

    def _reduce(self, e: Reduce) -> str:
        outer = dict(self.bound)
        local = f"_{e.var}{len(outer)}"
        scope = "{" + ", ".join(f"{k!r}: {v}" for k, v in outer.items()) + "}" if outer else "None"
        ids = f"_ids(n, {e.domain!r}, {scope})"
        self.bound[e.var] = local
        body = self.expr(e.body)
        self.bound = outer
        if e.kind == "sum":
            return f"sum(int({body}) for {local} in {ids})"
        return f"{e.kind}({body} for {local} in {ids})"


def source(e: Expr) -> str:
    """The body of the function ``compile_source`` builds for ``e`` (for reading and testing)."""
    return _Source().expr(e)


def compile_source(e: Expr) -> Compiled:
    """Return one Python function evaluating ``e`` on ``(names, arrays)``."""
    text = f"def _f(n, a):\n    return {source(e)}\n"
    scope: dict[str, Any] = {"_ids": _ids}
    exec(compile(text, "<spec expression>", "exec"), scope)  # noqa: S102 - source generated from the IR above
    fn: Compiled = scope["_f"]
    return fn
