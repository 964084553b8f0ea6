"""Declared min/max of every variable, as expressions evaluated with the runtime's constants.

``VarDecl.min``/``max`` are folded at the checked instance (``frontier: max pages * C`` is 6 for
``pages: 3, C: 2``); the runtime needs the same bound at its own page size and for the view's page
count, so it uses the declaration's ``min_expr``/``max_expr``.  For a Spec built without them, the
expression text is re-read from the spec document and parsed with the spec's own parser; failing
that, the folded integers are used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from morphcache.spec.errors import SpecError
from morphcache.spec.expr import Const, Expr
from morphcache.spec.model import Spec
from morphcache.spec.parse import Source, parse_expr


@dataclass(frozen=True)
class Bound:
    """``lo <= var <= hi``; either side None when undeclared."""

    lo: Expr | None
    hi: Expr | None


def _document(spec: Spec) -> Any:
    path = Path(spec.path)
    try:
        from morphcache.spec import loader

        load_document = getattr(loader, "load_document", None)
        if load_document is not None:
            return load_document(path)
        from morphcache.spec.yamlpos import load_yaml

        return load_yaml(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SpecError, ValueError):
        return None


def _decls(doc: Any, spec: Spec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(doc, dict):
        return out
    for section in ("system", "page"):
        part = doc.get(section)
        if isinstance(part, dict):
            out.update({k: (part, k) for k in part})
    objects = doc.get("objects")
    if isinstance(objects, dict):
        for obj in objects.values():
            if isinstance(obj, dict) and isinstance(obj.get("vars"), dict):
                out.update({k: (obj["vars"], k) for k in obj["vars"]})
    return out


def _parse(holder: Any, key: str, spec: Spec) -> Expr | None:
    value = holder.get(key)
    if value is None:
        return None
    marks = getattr(holder, "marks", {})
    line, col = marks.get(key, (0, 0))
    return parse_expr(str(value), Source(getattr(holder, "file", "") or spec.path, line, col))


def declared_bounds(spec: Spec) -> dict[str, Bound]:
    """Every integer variable's bound expressions (free names: constants and ``pages``)."""
    out: dict[str, Bound] = {}
    need_document = any(decl.type == "int" and (
        (decl.min is not None and getattr(decl, "min_expr", None) is None)
        or (decl.max is not None and getattr(decl, "max_expr", None) is None)) for decl in spec.vars.values())
    decls = _decls(_document(spec), spec) if need_document else {}
    for name, decl in spec.vars.items():
        if decl.type != "int":
            continue
        lo_expr, hi_expr = getattr(decl, "min_expr", None), getattr(decl, "max_expr", None)
        if (decl.min is None or lo_expr is not None) and (decl.max is None or hi_expr is not None):
            out[name] = Bound(lo_expr, hi_expr)
            continue
        lo: Expr | None = None if decl.min is None else Const(decl.min)
        hi: Expr | None = None if decl.max is None else Const(decl.max)
        found = decls.get(name)
        if found is not None and isinstance(found[0].get(name), dict):
            holder = found[0][name]
            try:
                lo = _parse(holder, "min", spec) if decl.min is not None else None
                hi = _parse(holder, "max", spec) if decl.max is not None else None
            except SpecError:
                lo = None if decl.min is None else Const(decl.min)
                hi = None if decl.max is None else Const(decl.max)
        out[name] = Bound(lo, hi)
    return out
