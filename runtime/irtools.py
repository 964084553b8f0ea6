"""Small passes over the spec's expression IR used before ``compile_expr``.

None of them restates a guard: they substitute the runtime's constants, fold closed sub-trees with
the spec's own evaluator, and classify expressions (which names they read, whether they only look at
the event's own page) so the runtime knows in which view an expression must be evaluated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from morphcache.spec.expr import (
    Const,
    Expr,
    Index,
    Name,
    Reduce,
    children,
    rebuild,
    substitute,
)
from morphcache.spec.interp import evaluate


def free_names(e: Expr, bound: frozenset[str] = frozenset()) -> set[str]:
    """Scalar names ``e`` reads that are not bound by an enclosing ``for q in pages``."""
    if isinstance(e, Name):
        return set() if e.name in bound else {e.name}
    out: set[str] = set()
    if isinstance(e, Reduce):
        out.add("pages")
        bound = bound | {e.var}
    for c in children(e):
        out |= free_names(c, bound)
    return out


def array_names(e: Expr) -> set[str]:
    """Per-page variables and object states ``e`` indexes."""
    out = {e.name} if isinstance(e, Index) else set()
    for c in children(e):
        out |= array_names(c)
    return out


def has_reduce(e: Expr) -> bool:
    """Whether ``e`` contains an ``all``/``any``/``sum`` over pages."""
    return isinstance(e, Reduce) or any(has_reduce(c) for c in children(e))


def is_closed(e: Expr) -> bool:
    """No names, no indexing, no reductions: the value is a constant."""
    if isinstance(e, (Name, Index, Reduce)):
        return False
    return all(is_closed(c) for c in children(e))


def fold(e: Expr, constants: Mapping[str, int]) -> Expr:
    """``e`` with the constants substituted and every closed sub-tree evaluated by the spec's evaluator."""
    bound = substitute(e, {k: Const(v) for k, v in constants.items()})
    return _fold(bound)


def _fold(e: Expr) -> Expr:
    if isinstance(e, Const):
        return e
    if is_closed(e):
        return Const(evaluate(e, {}), e.loc)
    return rebuild(e, _fold)


def page_local(e: Expr, var: str = "p", allowed: frozenset[str] = frozenset()) -> bool:
    """Whether ``e`` reads only the page ``var`` (as ``x[var]``) and names in ``allowed``.

    A page-local expression has the same value in every view that contains the page, so it can be
    evaluated once, on the page itself.
    """
    if isinstance(e, Const):
        return True
    if isinstance(e, Name):
        return e.name in allowed and e.name != var
    if isinstance(e, Index):
        return isinstance(e.index, Name) and e.index.name == var
    if isinstance(e, Reduce):
        return False
    return all(page_local(c, var, allowed) for c in children(e))


def replace_reductions(e: Expr, make: Callable[[Reduce], Name | None]) -> Expr:
    """``e`` with each reduction that ``make`` maps to a name replaced by that name."""
    if isinstance(e, Reduce):
        name = make(e)
        if name is not None:
            return name
    return rebuild(e, lambda c: replace_reductions(c, make))


def redirect_pages(e: Expr, var: str, to: str) -> Expr | None:
    """``e`` with every ``x[var]`` read as ``x[to]`` (``var`` elsewhere stays); None if ``e`` indexes
    by anything else or reduces over pages.

    A sequence view maps block index ``p`` to a physical page id; when an expression only ever indexes
    ``x[p]`` it can read the physical page table directly with ``to`` bound to the page id, while
    ``p`` keeps its arithmetic meaning (``p * C``).
    """
    if isinstance(e, Reduce):
        return None
    if isinstance(e, Index):
        if isinstance(e.index, Name) and e.index.name == var:
            return Index(e.name, (Name(to, e.index.loc),), e.loc)
        return None
    failed = False

    def sub(c: Expr) -> Expr:
        nonlocal failed
        out = redirect_pages(c, var, to)
        if out is None:
            failed = True
            return c
        return out

    out = rebuild(e, sub)
    return None if failed else out
