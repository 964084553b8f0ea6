"""Compile the spec's expression IR to Z3 terms over one symbolic state.

A state is a mapping from slot names (``frontier``, ``graph``, ``gen[0]``, ``tail[2]``) to Z3
terms.  Object states are integers indexing the object's state list; state literals are mapped to
their index by the object they are compared with.  Pages are concrete: ``p`` and bound ``q`` are
Python ints, so every index resolves to one slot (or, if symbolic, to an ``If`` chain).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import z3

from morphcache.spec.errors import SpecError
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
    render,
)
from morphcache.spec.model import Spec

if TYPE_CHECKING:
    from .deadline import Deadline

State = Mapping[str, Any]


class EncodingError(SpecError):
    """An expression cannot be encoded for this instance (e.g. a page index out of range): a spec
    error at the expression's position."""


def slot(name: str, page: int | None) -> str:
    """The state-slot name of a variable or object state: ``gen[1]`` or ``frontier``."""
    return name if page is None else f"{name}[{page}]"


class Terms:
    """Turns IR into Z3 for one spec instance."""

    def __init__(self, spec: Spec, constants: Mapping[str, int] | None = None) -> None:
        self.spec = spec
        self.constants = {**spec.constants, **(constants or {}), "pages": spec.pages}
        self.objects = spec.objects
        self.deadline: Deadline | None = None  # consulted once per node built

    def error(self, e: Expr, message: str) -> EncodingError:
        """A located error about ``e`` (in the file it was written in)."""
        return EncodingError(e.loc.file or self.spec.path, e.loc.line, e.loc.col, message)

    def object_of(self, e: Expr) -> str | None:
        """The object whose state ``e`` denotes, if any."""
        if isinstance(e, (Name, Index)) and e.name in self.objects:
            return e.name
        if isinstance(e, IfExp):
            return self.object_of(e.then) or self.object_of(e.other)
        return None

    def state_code(self, obj: str, value: str) -> int:
        return self.objects[obj].states.index(value)

    def out_of_range(self, e: Index, page: int, env: Mapping[str, Any]) -> EncodingError:
        """The error of an index that reaches a page the instance does not have."""
        last = f"outside pages 0..{self.spec.pages - 1}"
        if isinstance(e.index, Const):
            return self.error(e, f"{e.name}[{page}] is {last}")
        bound = ", ".join(f"{k}={v}" for k, v in env.items() if isinstance(v, int) and not isinstance(v, bool))
        return self.error(e, f"{render(e)} is {e.name}[{page}]{' at ' + bound if bound else ''}, {last}")

    def term(self, e: Expr, s: State, env: Mapping[str, Any], obj: str | None = None) -> Any:  # noqa: C901
        """The Z3 term of ``e`` in state ``s`` with names ``env`` bound (``obj`` types a literal)."""
        if self.deadline is not None:
            self.deadline.tick()
        if isinstance(e, Const):
            if isinstance(e.value, str):
                if obj is None:
                    raise self.error(e, f"state literal '{e.value}' without an object to compare with")
                return z3.IntVal(self.state_code(obj, e.value))
            return z3.BoolVal(e.value) if isinstance(e.value, bool) else z3.IntVal(e.value)
        if isinstance(e, Name):
            if e.name in env:
                v = env[e.name]
                return z3.IntVal(v) if isinstance(v, int) and not isinstance(v, bool) else v
            if e.name in self.constants:
                return z3.IntVal(self.constants[e.name])
            return s[e.name]
        if isinstance(e, Index):
            idx = z3.simplify(self.term(e.index, s, env))
            if z3.is_int_value(idx):
                page = idx.as_long()
                if not 0 <= page < self.spec.pages:
                    raise self.out_of_range(e, page, env)
                return s[slot(e.name, page)]
            result = s[slot(e.name, 0)]
            for page in range(1, self.spec.pages):
                result = z3.If(idx == page, s[slot(e.name, page)], result)
            return result
        if isinstance(e, Unary):
            inner = self.term(e.operand, s, env)
            return z3.Not(inner) if e.op == "not" else -inner
        if isinstance(e, Binary):
            lhs, rhs = self.term(e.left, s, env), self.term(e.right, s, env)
            ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
                   "//": lambda a, b: a / b, "%": lambda a, b: a % b}
            return ops[e.op](lhs, rhs)
        if isinstance(e, Compare):
            o = self.object_of(e.left) or self.object_of(e.right)
            lhs, rhs = self.term(e.left, s, env, o), self.term(e.right, s, env, o)
            cmp = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
                   "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
            return cmp[e.op](lhs, rhs)
        if isinstance(e, InSet):
            o = self.object_of(e.item)
            item = self.term(e.item, s, env, o)
            member = z3.Or([item == self.term(opt, s, env, o) for opt in e.options])
            return z3.Not(member) if e.negated else member
        if isinstance(e, BoolOp):
            parts = [self.term(v, s, env) for v in e.values]
            return z3.And(parts) if e.op == "and" else z3.Or(parts)
        if isinstance(e, Implies):
            return z3.Implies(self.term(e.left, s, env), self.term(e.right, s, env))
        if isinstance(e, IfExp):
            return z3.If(self.term(e.cond, s, env), self.term(e.then, s, env, obj), self.term(e.other, s, env, obj))
        if isinstance(e, Reduce):
            bodies = [self.term(e.body, s, {**env, e.var: q}) for q in range(self.spec.pages)]
            if e.kind == "all":
                return z3.And(bodies)
            if e.kind == "any":
                return z3.Or(bodies)
            return z3.Sum([z3.If(b, 1, 0) if z3.is_bool(b) else b for b in bodies]) if bodies else z3.IntVal(0)
        raise TypeError(f"not an expression node: {e!r}")
