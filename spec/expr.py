"""The expression IR: one tree per guard, effect, predicate and property.

Every expression in a spec (guards, effects, invariants, readiness predicates, recovery-path
conditions) is parsed once into these frozen nodes.  The same tree is compiled three ways:
to Z3 terms (``morphcache.proofs``), to Python closures (``morphcache.runtime``) and to diagram
labels (:func:`render`).  Nothing is ever restated by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

Value = int | bool | str


@dataclass(frozen=True)
class Loc:
    """Where a node came from: 1-based line and column in the spec file ``file`` (empty: the spec's own
    path; a spec with ``extends:`` has nodes from several files)."""

    line: int = 0
    col: int = 0
    file: str = ""


_NOLOC = Loc()


@dataclass(frozen=True)
class Const:
    """A literal: an int, a bool, or a state name (a quoted string)."""

    value: Value
    loc: Loc = field(default=_NOLOC, compare=False)


@dataclass(frozen=True)
class Name:
    """A scalar: a system variable, a system object's state, a constant, a parameter or a bound page."""

    name: str
    loc: Loc = field(default=_NOLOC, compare=False)


@dataclass(frozen=True)
class Index:
    """An indexed variable or object state: ``gen[p]`` (per page), ``frontier[r]`` (per reader),
    ``lgen[r, p]`` (per reader and page).  ``args`` are the subscripts, in that order."""

    name: str
    args: tuple[Expr, ...]
    loc: Loc = field(default=_NOLOC, compare=False)

    @property
    def index(self) -> Expr:
        """The last subscript: the page of a per-page or per-(reader, page) name, the reader of a per-reader one."""
        return self.args[-1]


@dataclass(frozen=True)
class Unary:
    """``not x`` or ``-x``."""

    op: str
    operand: Expr
    loc: Loc = field(default=_NOLOC, compare=False)


@dataclass(frozen=True)
class Binary:
    """Arithmetic: ``+ - * // %``."""

    op: str
    left: Expr
    right: Expr
    loc: Loc = field(default=_NOLOC, compare=False)


@dataclass(frozen=True)
class Compare:
    """A single comparison: ``== != < <= > >=`` (chains are split into ``and``)."""

    op: str
    left: Expr
    right: Expr
    loc: Loc = field(default=_NOLOC, compare=False)


@dataclass(frozen=True)
class InSet:
    """Membership in a literal set: ``tier[p] in {'host', 'disk'}``."""

    item: Expr
    options: tuple[Expr, ...]
    negated: bool = False
    loc: Loc = field(default=_NOLOC, compare=False)


@dataclass(frozen=True)
class BoolOp:
    """``and`` / ``or`` over two or more operands."""

    op: str
    values: tuple[Expr, ...]
    loc: Loc = field(default=_NOLOC, compare=False)


@dataclass(frozen=True)
class Implies:
    """``implies(a, b)``."""

    left: Expr
    right: Expr
    loc: Loc = field(default=_NOLOC, compare=False)


@dataclass(frozen=True)
class IfExp:
    """``a if c else b``."""

    cond: Expr
    then: Expr
    other: Expr
    loc: Loc = field(default=_NOLOC, compare=False)


PAGES, READERS = "pages", "readers"


@dataclass(frozen=True)
class Reduce:
    """``all(...)``, ``any(...)`` or ``sum(...)`` of ``body`` for ``var in domain`` (``pages`` or ``readers``)."""

    kind: str
    var: str
    body: Expr
    loc: Loc = field(default=_NOLOC, compare=False)
    domain: str = PAGES


Expr = Const | Name | Index | Unary | Binary | Compare | InSet | BoolOp | Implies | IfExp | Reduce

_PREC = {"or": 1, "and": 2, "not": 3, "cmp": 4, "+": 5, "-": 5, "*": 6, "//": 6, "%": 6, "neg": 7}


def render(e: Expr) -> str:
    """Return the expression as compact source text (used for diagram labels and messages)."""
    return _render(e, 0)


def _wrap(text: str, prec: int, outer: int) -> str:
    return f"({text})" if prec < outer else text


def _render(e: Expr, outer: int) -> str:  # noqa: C901 - one case per node kind
    if isinstance(e, Const):
        return repr(e.value) if isinstance(e.value, str) else str(e.value)
    if isinstance(e, Name):
        return e.name
    if isinstance(e, Index):
        return f"{e.name}[{', '.join(_render(a, 0) for a in e.args)}]"
    if isinstance(e, Unary):
        if e.op == "not":
            return _wrap(f"not {_render(e.operand, _PREC['not'])}", _PREC["not"], outer)
        return _wrap(f"-{_render(e.operand, _PREC['neg'])}", _PREC["neg"], outer)
    if isinstance(e, Binary):
        p = _PREC[e.op]
        return _wrap(f"{_render(e.left, p)} {e.op} {_render(e.right, p + 1)}", p, outer)
    if isinstance(e, Compare):
        p = _PREC["cmp"]
        return _wrap(f"{_render(e.left, p + 1)} {e.op} {_render(e.right, p + 1)}", p, outer)
    if isinstance(e, InSet):
        opts = ", ".join(_render(o, 0) for o in e.options)
        word = "not in" if e.negated else "in"
        return _wrap(f"{_render(e.item, _PREC['cmp'] + 1)} {word} {{{opts}}}", _PREC["cmp"], outer)
    if isinstance(e, BoolOp):
        p = _PREC[e.op]
        return _wrap(f" {e.op} ".join(_render(v, p + 1) for v in e.values), p, outer)
    if isinstance(e, Implies):
        return f"implies({_render(e.left, 0)}, {_render(e.right, 0)})"
    if isinstance(e, IfExp):
        text = f"{_render(e.then, 1)} if {_render(e.cond, 1)} else {_render(e.other, 0)}"
        return _wrap(text, 0, outer)
    if isinstance(e, Reduce):
        return f"{e.kind}({_render(e.body, 0)} for {e.var} in {e.domain})"
    raise TypeError(f"not an expression node: {e!r}")


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``e``."""
    if isinstance(e, (Const, Name)):
        return ()
    if isinstance(e, Index):
        return e.args
    if isinstance(e, Unary):
        return (e.operand,)
    if isinstance(e, (Binary, Compare, Implies)):
        return (e.left, e.right)
    if isinstance(e, InSet):
        return (e.item, *e.options)
    if isinstance(e, BoolOp):
        return e.values
    if isinstance(e, IfExp):
        return (e.cond, e.then, e.other)
    if isinstance(e, Reduce):
        return (e.body,)
    raise TypeError(f"not an expression node: {e!r}")


def walk(e: Expr) -> Iterator[Expr]:
    """Every node of ``e``, depth first, parents before children."""
    yield e
    for child in children(e):
        yield from walk(child)


def rebuild(e: Expr, f: Callable[[Expr], Expr]) -> Expr:
    """``e`` with ``f`` applied to each direct sub-expression (same node kind, same location)."""
    if isinstance(e, (Const, Name)):
        return e
    if isinstance(e, Index):
        return Index(e.name, tuple(f(a) for a in e.args), e.loc)
    if isinstance(e, Unary):
        return Unary(e.op, f(e.operand), e.loc)
    if isinstance(e, Binary):
        return Binary(e.op, f(e.left), f(e.right), e.loc)
    if isinstance(e, Compare):
        return Compare(e.op, f(e.left), f(e.right), e.loc)
    if isinstance(e, InSet):
        return InSet(f(e.item), tuple(f(o) for o in e.options), e.negated, e.loc)
    if isinstance(e, BoolOp):
        return BoolOp(e.op, tuple(f(v) for v in e.values), e.loc)
    if isinstance(e, Implies):
        return Implies(f(e.left), f(e.right), e.loc)
    if isinstance(e, IfExp):
        return IfExp(f(e.cond), f(e.then), f(e.other), e.loc)
    if isinstance(e, Reduce):
        return Reduce(e.kind, e.var, f(e.body), e.loc, e.domain)
    raise TypeError(f"not an expression node: {e!r}")


def substitute(e: Expr, binding: Mapping[str, Expr]) -> Expr:
    """Return ``e`` with the free names in ``binding`` replaced (used to inline predicates)."""
    if isinstance(e, Name):
        return binding.get(e.name, e)
    if isinstance(e, Reduce):
        inner = {k: v for k, v in binding.items() if k != e.var}
        return Reduce(e.kind, e.var, substitute(e.body, inner), e.loc, e.domain)
    return rebuild(e, lambda child: substitute(child, binding))


def conjuncts(e: Expr) -> tuple[Expr, ...]:
    """Split a top-level ``and`` (and ``all`` bodies are left whole) into its operands."""
    if isinstance(e, BoolOp) and e.op == "and":
        return tuple(c for v in e.values for c in conjuncts(v))
    return (e,)
