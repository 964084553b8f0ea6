"""Type-check IR expressions against a spec's declarations.

Types are ``int``, ``bool``, ``reader`` (a reader: ``r``, or ``s`` bound by ``for s in readers``;
it can only subscript a per-reader name or be compared with ``==``/``!=``) and ``state:OBJ`` (the
state of object OBJ).  A quoted literal is a state name and is checked against the object it is
compared with.  Every error is a located :class:`SpecError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import SpecError
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

STR = "str"
READER_T = "reader"
_SUBSCRIPTS = {"page": ("int",), "reader": (READER_T,), "reader_page": (READER_T, "int")}
_WRITTEN = {"page": "{}[p]", "reader": "{}[r]", "reader_page": "{}[r, p]"}


@dataclass(frozen=True)
class Scope:
    """What names mean: scalars (name -> type), indexed arrays (name -> type), object states, and
    each array's dimensions (``dims``: name -> page, reader or reader_page; page when absent)."""

    path: str
    scalars: Mapping[str, str]
    arrays: Mapping[str, str]
    states: Mapping[str, tuple[str, ...]]
    dims: Mapping[str, str] = field(default_factory=dict)

    def bind(self, **extra: str) -> Scope:
        """A scope with more scalar names (event params, bound pages and readers, ``pos``)."""
        return Scope(self.path, {**self.scalars, **extra}, self.arrays, self.states, self.dims)

    def dim(self, name: str) -> str:
        """The dimensions of array ``name``."""
        return self.dims.get(name, "page")

    def error(self, e: Expr, message: str) -> SpecError:
        return SpecError(self.path, e.loc.line, e.loc.col, message)


def check(e: Expr, scope: Scope, want: str | None = None) -> str:
    """Return the type of ``e``; raise if it is ill-typed or not of type ``want``."""
    got = _type(e, scope)
    if want is not None and got != want:
        raise scope.error(e, f"expected {_show(want)}, got {_show(got)}")
    return got


def _show(t: str) -> str:
    return f"a state of '{t[6:]}'" if t.startswith("state:") else ("a state name" if t == STR else t)


def _type(e: Expr, s: Scope) -> str:  # noqa: C901 - one case per node kind
    if isinstance(e, Const):
        return "bool" if isinstance(e.value, bool) else ("int" if isinstance(e.value, int) else STR)
    if isinstance(e, Name):
        if e.name in s.scalars:
            return s.scalars[e.name]
        if e.name in s.arrays:
            dim = s.dim(e.name)
            raise s.error(e, f"'{e.name}' is per {dim.replace('_', ' and ')}: write {_WRITTEN[dim].format(e.name)}")
        raise s.error(e, f"unknown name '{e.name}'")
    if isinstance(e, Index):
        if e.name not in s.arrays:
            if e.name in s.scalars:
                raise s.error(e, f"'{e.name}' is not indexed (not per page or per reader)")
            raise s.error(e, f"unknown per-page or per-reader variable or object '{e.name}'")
        dim = s.dim(e.name)
        want = _SUBSCRIPTS[dim]
        if len(e.args) != len(want):
            raise s.error(e, f"'{e.name}' is per {dim.replace('_', ' and ')}: write {_WRITTEN[dim].format(e.name)}")
        for arg, t in zip(e.args, want, strict=True):
            got = _type(arg, s)
            if got != t:
                what = "a reader (r, or s bound by 'for s in readers')" if t == READER_T else "a page (an int)"
                raise s.error(arg, f"subscript of '{e.name}' must be {what}, got {_show(got)}")
        return s.arrays[e.name]
    if isinstance(e, Unary):
        return check(e.operand, s, "bool" if e.op == "not" else "int")
    if isinstance(e, Binary):
        check(e.left, s, "int")
        check(e.right, s, "int")
        return "int"
    if isinstance(e, Compare):
        _comparable(e.left, e.right, s, ordered=e.op not in ("==", "!="))
        return "bool"
    if isinstance(e, InSet):
        for opt in e.options:
            _comparable(e.item, opt, s, ordered=False)
        return "bool"
    if isinstance(e, BoolOp):
        for v in e.values:
            check(v, s, "bool")
        return "bool"
    if isinstance(e, Implies):
        check(e.left, s, "bool")
        check(e.right, s, "bool")
        return "bool"
    if isinstance(e, IfExp):
        check(e.cond, s, "bool")
        t = check(e.then, s)
        check(e.other, s, t)
        return t
    if isinstance(e, Reduce):
        inner = s.bind(**{e.var: READER_T if e.domain == "readers" else "int"})
        check(e.body, inner, "int" if e.kind == "sum" else "bool")
        return "int" if e.kind == "sum" else "bool"
    raise TypeError(f"not an expression node: {e!r}")


def _comparable(left: Expr, right: Expr, s: Scope, ordered: bool) -> None:
    lt, rt = _type(left, s), _type(right, s)
    if lt == STR and rt == STR:
        raise s.error(left, "comparing two state names is always constant")
    for side, t, other in ((right, rt, lt), (left, lt, rt)):
        if t == STR and other.startswith("state:"):
            assert isinstance(side, Const)
            obj = other[6:]
            if side.value not in s.states[obj]:
                raise s.error(side, f"'{side.value}' is not a state of '{obj}' (states: "
                              f"{', '.join(s.states[obj])})")
            return
    if lt != rt:
        raise s.error(left, f"cannot compare {_show(lt)} with {_show(rt)}")
    if ordered and lt != "int":
        raise s.error(left, f"ordering comparison needs ints, got {_show(lt)}")
