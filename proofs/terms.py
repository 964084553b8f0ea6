"""Compile the spec's expression IR to Z3 terms over one symbolic state.

A state is a mapping from slot names to Z3 terms::

    scope         name as written   slot
    system        frontier          frontier
    page          gen[p]            gen[0], gen[1], ...
    reader        frontier[r]       frontier[r0], frontier[r1], ...
    reader_page   lgen[r, p]        lgen[r0,0], lgen[r0,1], ..., lgen[r1,0], ...

Object states are integers indexing the object's state list; state literals are mapped to their
index by the object they are compared with.  Pages and readers are concrete: ``p``, ``r`` and the
bound ``q``, ``s`` are Python ints, so every index resolves to one slot (or, if symbolic, to an
``If`` chain over the slots).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import z3

from morphcache.spec.errors import SpecError
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
    render,
)
from morphcache.spec.model import SCOPE_ARGS, Spec

if TYPE_CHECKING:
    from .deadline import Deadline

State = Mapping[str, Any]


class EncodingError(SpecError):
    """An expression cannot be encoded for this instance (e.g. a page index out of range): a spec
    error at the expression's position."""


def slot(name: str, page: int | None = None, reader: int | None = None) -> str:
    """The state-slot name of a variable or object state: ``frontier``, ``gen[1]``, ``frontier[r0]``,
    ``lgen[r0,1]``."""
    if reader is None:
        return name if page is None else f"{name}[{page}]"
    return f"{name}[r{reader}]" if page is None else f"{name}[r{reader},{page}]"


def parse_slot(key: str) -> tuple[str, int | None, int | None]:
    """``(name, reader, page)`` of a slot name written by :func:`slot`."""
    if not key.endswith("]") or "[" not in key:
        return key, None, None
    base, inner = key[:-1].split("[", 1)
    reader: int | None = None
    page: int | None = None
    for part in inner.split(","):
        if part.startswith("r"):
            reader = int(part[1:])
        else:
            page = int(part)
    return base, reader, page


def slot_args(spec: Spec, name: str) -> list[tuple[int | None, int | None]]:
    """Every ``(reader, page)`` at which ``name`` has a slot in the instance, in slot order."""
    scope = spec.scope_of(name)
    readers: list[int | None] = list(spec.reader_range()) if "r" in SCOPE_ARGS[scope] else [None]
    pages: list[int | None] = list(spec.page_range()) if "p" in SCOPE_ARGS[scope] else [None]
    return [(r, p) for r in readers for p in pages]


def floor_div(a: Any, b: Any) -> Any:
    """Python's ``a // b`` (rounds toward minus infinity): SMT-LIB ``div`` agrees for ``b > 0`` only.

    For ``b == 0`` the value is unspecified, as in Z3; :mod:`proofs.definedness` makes every divisor
    that may be zero an obligation, so no proof rests on it.
    """
    if z3.is_int_value(b):
        value = b.as_long()
        return a / b if value > 0 else (-a) / (-b) if value < 0 else a / b
    return z3.If(b < 0, (-a) / (-b), a / b)


class Terms:
    """Turns IR into Z3 for one spec instance."""

    def __init__(self, spec: Spec, constants: Mapping[str, int] | None = None) -> None:
        self.spec = spec
        self.constants = {**spec.constants, **(constants or {}), "pages": spec.pages, "readers": spec.readers}
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

    def out_of_range(self, e: Index, dim: str, value: int, what: str, size: int,
                     env: Mapping[str, Any]) -> EncodingError:
        """The error of a subscript that reaches a page (or reader) the instance does not have."""
        last = f"outside {what} 0..{size - 1}"
        shown = f"{e.name}[{value}]" if dim == "p" else f"{e.name}[r{value}]"
        if len(e.args) > 1:
            shown = f"{e.name}[.., {value}]" if dim == "p" else f"{e.name}[r{value}, ..]"
        if all(isinstance(a, Const) for a in e.args):
            return self.error(e, f"{shown} is {last}")
        bound = ", ".join(f"{k}={v}" for k, v in env.items() if isinstance(v, int) and not isinstance(v, bool))
        return self.error(e, f"{render(e)} is {shown}{' at ' + bound if bound else ''}, {last}")

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
            return self.index(e, s, env)
        if isinstance(e, Unary):
            inner = self.term(e.operand, s, env)
            return z3.Not(inner) if e.op == "not" else -inner
        if isinstance(e, Binary):
            lhs, rhs = self.term(e.left, s, env), self.term(e.right, s, env)
            ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
                   "//": floor_div, "%": lambda a, b: a - b * floor_div(a, b)}
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
            ids = self.spec.reader_range() if e.domain == READERS else self.spec.page_range()
            bodies = [self.term(e.body, s, {**env, e.var: q}) for q in ids]
            if e.kind == "all":
                return z3.And(bodies)
            if e.kind == "any":
                return z3.Or(bodies)
            return z3.Sum([z3.If(b, 1, 0) if z3.is_bool(b) else b for b in bodies]) if bodies else z3.IntVal(0)
        raise TypeError(f"not an expression node: {e!r}")

    def index(self, e: Index, s: State, env: Mapping[str, Any]) -> Any:
        """The slot ``e`` names, or an ``If`` chain over the slots when a subscript is symbolic."""
        scope = self.spec.scope_of(e.name)
        dims = SCOPE_ARGS[scope]
        subs = [z3.simplify(self.term(a, s, env)) for a in e.args]
        sizes = {"r": self.spec.readers, "p": self.spec.pages}
        what = {"r": "readers", "p": "pages"}
        concrete: list[int | None] = []
        for dim, sub in zip(dims, subs, strict=True):
            if z3.is_int_value(sub):
                value = sub.as_long()
                if not 0 <= value < sizes[dim]:
                    raise self.out_of_range(e, dim, value, what[dim], sizes[dim], env)
                concrete.append(value)
            else:
                concrete.append(None)
        choices = [range(sizes[d]) if c is None else [c] for d, c in zip(dims, concrete, strict=True)]
        combos = list(itertools.product(*choices))
        result = None
        for combo in combos:
            at = dict(zip(dims, combo, strict=True))
            term = s[slot(e.name, at.get("p"), at.get("r"))]
            if result is None:
                result = term
                continue
            cond = z3.And([sub == v for sub, v, c in zip(subs, combo, concrete, strict=True) if c is None])
            result = z3.If(cond, term, result)
        return result

