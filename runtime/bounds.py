"""Declared min/max of every variable, as expressions evaluated with the runtime's constants.

``VarDecl.min``/``max`` are folded at the checked instance (``frontier: max pages * C`` is 6 for
``pages: 3, C: 2``); the runtime needs the same bound at its own page size and for the view's page
count, so it uses the declaration's ``min_expr``/``max_expr`` (the bound as written in the spec),
falling back to the folded integer for a declaration built without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from morphcache.spec.expr import Const, Expr
from morphcache.spec.model import Param, Spec

from .irtools import fold


@dataclass(frozen=True)
class Bound:
    """``lo <= var <= hi``; either side None when undeclared."""

    lo: Expr | None
    hi: Expr | None


def _side(expr: Expr | None, folded: int | None) -> Expr | None:
    if expr is not None:
        return expr
    return None if folded is None else Const(folded)


def declared_bounds(spec: Spec) -> dict[str, Bound]:
    """Every integer variable's bound expressions (free names: constants and ``pages``)."""
    return {
        name: Bound(_side(decl.min_expr, decl.min), _side(decl.max_expr, decl.max))
        for name, decl in spec.vars.items()
        if decl.type == "int"
    }


def param_at(prm: Param, constants: Mapping[str, int]) -> Param:
    """An event param with its bounds at the runtime's constants (``max: R`` is the runtime's R); a
    bound that does not fold to an int (it names the instance's page count) keeps the checked value."""
    lo = fold(prm.min_expr, constants) if prm.min_expr is not None else Const(prm.min)
    hi = fold(prm.max_expr, constants) if prm.max_expr is not None else Const(prm.max)
    if not (isinstance(lo, Const) and isinstance(lo.value, int) and isinstance(hi, Const)
            and isinstance(hi.value, int)):
        return prm
    return Param(prm.name, lo.value, hi.value, prm.min_expr, prm.max_expr)
