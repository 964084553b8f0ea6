"""Small passes over the spec's expression IR, run once before the runtime compiles an expression.

None of them restates a guard: they substitute the runtime's constants and fold closed sub-trees with
the spec's own evaluator (``fold``), simplify what substituted values decide (``simplify``: the
partial evaluator behind the domain analysis), replace state names by the integer codes the state
store keeps (``encode_states``), and say which names an expression reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from morphcache.spec.expr import (
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
    children,
    rebuild,
    substitute,
    walk,
)
from morphcache.spec.interp import evaluate

NEUTRAL = {"all": True, "any": False, "sum": 0}


def free_names(e: Expr, bound: frozenset[str] = frozenset()) -> set[str]:
    """Scalar names ``e`` reads that no enclosing reduction binds."""
    if isinstance(e, Name):
        return set() if e.name in bound else {e.name}
    out: set[str] = set()
    if isinstance(e, Reduce):
        bound = bound | {e.var}
    for c in children(e):
        out |= free_names(c, bound)
    return out


def array_names(e: Expr) -> set[str]:
    """Variables and object states ``e`` indexes."""
    return {n.name for n in walk(e) if isinstance(n, Index)}


def reductions(e: Expr) -> Iterator[Reduce]:
    """Every reduction in ``e``, outermost first."""
    return (n for n in walk(e) if isinstance(n, Reduce))


def is_closed(e: Expr) -> bool:
    """No names, no indexing, no reductions: the value is a constant."""
    if isinstance(e, (Name, Index, Reduce)):
        return False
    return all(is_closed(c) for c in children(e))


def fold(e: Expr, constants: Mapping[str, int]) -> Expr:
    """``e`` with the constants substituted and every closed sub-tree evaluated by the spec's evaluator."""
    return _fold(substitute(e, {k: Const(v) for k, v in constants.items()}))


def _fold(e: Expr) -> Expr:
    if isinstance(e, Const):
        return e
    if is_closed(e):
        return Const(evaluate(e, {}), e.loc)
    return rebuild(e, _fold)


def replace_index(e: Expr, make: Callable[[Index], Expr | None]) -> Expr:
    """``e`` with every ``Index`` node that ``make`` maps to an expression replaced by it."""
    if isinstance(e, Index):
        out = make(e)
        if out is not None:
            return out
    return rebuild(e, lambda c: replace_index(c, make))


def replace_reductions(e: Expr, make: Callable[[Reduce], Expr | None]) -> Expr:
    """``e`` with each reduction that ``make`` maps to an expression replaced by it (inner ones first
    are left to ``make``)."""
    if isinstance(e, Reduce):
        out = make(e)
        if out is not None:
            return out
    return rebuild(e, lambda c: replace_reductions(c, make))


def simplify(e: Expr) -> Expr:  # noqa: C901 - one case per node kind
    """Partial evaluation: constant sub-trees folded, and ``and``/``or``/``implies``/``if`` decided
    by their constant operands (``implies(False, x)`` is ``True`` whatever ``x`` reads).  A reduction
    whose body simplifies to its neutral element is that element."""
    e = rebuild(e, simplify)
    if is_closed(e):
        return Const(evaluate(e, {}), e.loc)
    if isinstance(e, BoolOp):
        stop, skip = (False, True) if e.op == "and" else (True, False)
        kept = []
        for v in e.values:
            if isinstance(v, Const):
                if bool(v.value) == stop:
                    return Const(stop, e.loc)
                continue
            kept.append(v)
        if not kept:
            return Const(skip, e.loc)
        return kept[0] if len(kept) == 1 else BoolOp(e.op, tuple(kept), e.loc)
    if isinstance(e, Implies):
        if isinstance(e.left, Const):
            return e.right if e.left.value else Const(True, e.loc)
        if isinstance(e.right, Const):
            return Const(True, e.loc) if e.right.value else Unary("not", e.left, e.loc)
        return e
    if isinstance(e, IfExp):
        if isinstance(e.cond, Const):
            return e.then if e.cond.value else e.other
        if isinstance(e.then, Const) and isinstance(e.other, Const) and e.then.value == e.other.value:
            return e.then
        return e
    if isinstance(e, Reduce) and isinstance(e.body, Const):
        if e.kind == "sum":
            if e.body.value == 0:
                return Const(0, e.loc)
        elif bool(e.body.value) == NEUTRAL[e.kind]:
            return Const(NEUTRAL[e.kind], e.loc)
    return e


def is_neutral(body: Expr, kind: str) -> bool:
    """Whether ``body`` (already substituted) simplifies to the neutral element of a ``kind`` reduction."""
    out = simplify(body)
    if not isinstance(out, Const):
        return False
    if kind == "sum":
        return out.value == 0 and not isinstance(out.value, str)
    return isinstance(out.value, (bool, int)) and not isinstance(out.value, str) and bool(out.value) == NEUTRAL[kind]


def object_of(e: Expr, objects: Mapping[str, object]) -> str | None:
    """The object whose state ``e`` denotes (``tail[p]``, a system object's name, an ``if`` of them)."""
    if isinstance(e, (Index, Name)) and e.name in objects:
        return e.name
    if isinstance(e, IfExp):
        return object_of(e.then, objects) or object_of(e.other, objects)
    return None


def encode_states(e: Expr, codes: Mapping[str, Mapping[str, int]], obj: str | None = None) -> Expr:
    """``e`` with every state name replaced by its integer code (the object is read off what the name
    is compared with or assigned to: ``obj`` for an effect's value)."""
    if isinstance(e, Const) and isinstance(e.value, str):
        if obj is None:
            raise ValueError(f"state name '{e.value}' compared with no object's state")
        return Const(codes[obj][e.value], e.loc)
    if isinstance(e, Compare):
        o = object_of(e.left, codes) or object_of(e.right, codes)
        return Compare(e.op, encode_states(e.left, codes, o), encode_states(e.right, codes, o), e.loc)
    if isinstance(e, InSet):
        o = object_of(e.item, codes) or next((x for x in map(lambda v: object_of(v, codes), e.options) if x), None)
        return InSet(encode_states(e.item, codes, o), tuple(encode_states(v, codes, o) for v in e.options),
                     e.negated, e.loc)
    if isinstance(e, IfExp):
        return IfExp(encode_states(e.cond, codes), encode_states(e.then, codes, obj),
                     encode_states(e.other, codes, obj), e.loc)
    return rebuild(e, lambda c: encode_states(c, codes))


def uses_name(e: Expr, name: str) -> bool:
    """Whether ``e`` reads the scalar ``name`` (free)."""
    return name in free_names(e)


def index_args(e: Index) -> tuple[str | None, ...]:
    """The subscripts of an ``Index`` as names (None for a subscript that is not a bare name)."""
    return tuple(a.name if isinstance(a, Name) else None for a in e.args)

