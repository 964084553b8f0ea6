"""Batch plans: which firings of one event the vector backend may decide together, and how.

A batch fires in order; the k-th firing sees what the earlier ones wrote.  The planner decides, once
per event and batch shape, how each conjunct and effect of the k-th firing can be computed from the
state *before* the batch::

    shape "one"   one reader r, distinct pages      (acquire/read/release over a lease; attach)
    shape "many"  distinct readers, distinct pages  (one decode step: append on every sequence)
    shape "pages" distinct pages, no reader         (forget / drop / slide over many pages)
    shape "repeat" one reader, one page, k times     (the appends that fill a page)

    pre     reads nothing an earlier firing writes (different pages, different readers): evaluated
            on the pre-state, for every firing at once
    affine  also reads x[r] (or, repeating on one page, x[p]) that each firing sets to itself + c:
            evaluated with x + k * c
    once    reads what earlier firings write, but the event preserves it (preserve.py): holds at
            every firing once it holds at the first; evaluated once
    (none)  anything else: no plan; the pipeline fires the batch one by one

Read and write patterns of a name: ``p``/``r``/``rp`` at the firing's own page, reader or (reader,
page); ``r*`` its reader's row; ``*p`` its page's column; ``any`` anywhere (a page or reader bound by
a quantifier over every live id, an aggregate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from morphcache.spec.expr import Binary, BoolOp, Compare, Const, Expr, Index, Name, Reduce, Unary, walk

from .compiler import CompiledEvent, CompiledSpec
from .domains import PAGE_READERS, READER_PAGES
from .irtools import array_names
from .names import aggregate_terms
from .preserve import preserved

PRE, AFFINE, ONCE = "pre", "affine", "once"


@dataclass(frozen=True)
class Plan:
    """How a batch of one event and shape is evaluated: a class per conjunct and per effect."""

    shape: str
    conjuncts: tuple[str, ...]
    effects: tuple[str, ...]
    affine: dict[str, int]  # reader variable -> its increment per firing (shape "one")
    ends: bool = False  # repeat: every affine conjunct convex and effect linear in k (see ``_ends``)
    pair_writes: bool = True  # the owner or an effect is per (reader, page): written one pair at a time
    stepped: dict[str, int] = field(default_factory=dict)  # aggregate -> its change per firing (``_stepped``)

    @property
    def independent(self) -> bool:
        """Each firing's outcome is its own (no affine or once class): may fire non-atomically."""
        return all(c == PRE for c in self.conjuncts + self.effects)

    @property
    def counted(self) -> bool:
        """Each firing's outcome is its own but for stepped aggregates (the affine conjuncts read nothing
        else stepped, no effect is affine): may fire non-atomically, each firing seeing the aggregates
        moved by the firings before it that fired (``VectorFiring``)."""
        return not self.affine and all(e == PRE for e in self.effects) and ONCE not in self.conjuncts


class BatchPlanner:
    """Plans per (event, shape), computed on first use."""

    def __init__(self, cspec: CompiledSpec) -> None:
        self.cspec = cspec
        self.plans: dict[tuple[str, str], Plan | None] = cspec.memo.setdefault("plans", {})  # type: ignore[assignment]

    def plan(self, ev: CompiledEvent, r: Any, p: Any, repeat: bool = False) -> Plan | None:
        """The plan for this batch, or None when it must fire one by one (``repeat``: the same reader and
        page every time)."""
        if p is None:
            return None
        if repeat:
            shape = "repeat"
        else:
            shape = "pages" if r is None else ("one" if isinstance(r, (int, np.integer)) else "many")
        key = (ev.name, shape)
        if key not in self.plans:
            self.plans[key] = self._plan(ev, shape)
        return self.plans[key]

    # -- analysis ---------------------------------------------------------------------------------
    def _reads(self, e: Expr, stepped: Any = ()) -> set[tuple[str, str]]:
        """What ``e`` reads, as (name, pattern); an aggregate of ``stepped`` read directly is left out."""
        out: set[tuple[str, str]] = set()
        domains = self.cspec.domains
        for node in walk(e):
            if isinstance(node, Index):
                out.add((node.name, self._pattern(node, e)))
            elif isinstance(node, Name) and node.name in self.cspec.aggregates and node.name not in stepped:
                out |= {(v, "any") for v in self.cspec.aggregates[node.name].reads}
            elif isinstance(node, Name) and node.name in self.cspec.tracked:
                out |= self._reads(self.cspec.tracked[node.name])
            elif isinstance(node, Reduce):
                dom = domains[node.domain]
                if dom.kind == READER_PAGES and dom.key == "r":
                    out |= {(v, "r*") for v in dom.vars}
                elif dom.kind == PAGE_READERS and dom.key == "p":
                    out |= {(v, "*p") for v in dom.vars}
                else:
                    out |= {(v, "any") for v in dom.vars}
        return out

    def _pattern(self, node: Index, root: Expr) -> str:
        args = [a.name if isinstance(a, Name) else None for a in node.args]
        scope = self.cspec.scopes.get(node.name)
        if scope == "page":
            return "p" if args == ["p"] else "any"
        if scope == "reader":
            return "r" if args == ["r"] else "any"
        if args == ["r", "p"]:
            return "rp"
        if args[0] == "r" and self._bound_over(root, args[1], READER_PAGES, "r"):
            return "r*"
        if args[1] == "p" and self._bound_over(root, args[0], PAGE_READERS, "p"):
            return "*p"
        return "any"

    def _bound_over(self, root: Expr, var: str | None, kind: str, key: str) -> bool:
        for node in walk(root):
            if isinstance(node, Reduce) and node.var == var:
                dom = self.cspec.domains[node.domain]
                return dom.kind == kind and dom.key == key
        return False

    def _writes(self, ev: CompiledEvent) -> set[tuple[str, str]]:
        own = {"page": "p", "reader": "r"}.get(ev.scope, "rp")
        out = {(ev.owner, own)}
        for eff in ev.effects:
            out.add((eff.target, {"p": "p", "r": "r", "r,p": "rp", "r,*": "r*", "*,p": "*p"}.get(eff.index, "any")))
        return out

    @staticmethod
    def _alias(w: str, r: str, same_reader: bool, same_page: bool = False) -> bool:
        if "any" in (w, r):
            return True
        table = {
            ("p", "p"): same_page, ("r", "r"): same_reader,
            ("rp", "rp"): same_page and same_reader, ("rp", "r*"): same_reader, ("rp", "*p"): same_page,
            ("r*", "rp"): same_reader, ("r*", "r*"): same_reader, ("r*", "*p"): True,
            ("*p", "rp"): same_page, ("*p", "r*"): True, ("*p", "*p"): same_page,
        }
        return table.get((w, r), True)

    def _affine(self, ev: CompiledEvent, pages: bool = False) -> dict[str, int]:
        out: dict[str, int] = {}
        for eff in ev.effects:
            v = eff.expr
            if (eff.index == "r" or (pages and eff.index == "p")) and isinstance(v, Binary) and v.op in ("+", "-"):
                left, right = v.left, v.right
                if isinstance(left, Index) and left.name == eff.target and isinstance(right, Const):
                    out[eff.target] = int(right.value) * (1 if v.op == "+" else -1)
        return out

    def _stepped(self, ev: CompiledEvent) -> dict[str, int]:
        """The aggregates ``ev`` reads that each of its firings moves by one constant: a sum over the pages
        of the event's own page object (written only as the owner), whose term is the same in every source
        state: distinct pages, so the k-th firing of a batch sees it moved k times."""
        out: dict[str, int] = {}
        if ev.scope != "page" or any(e.target == ev.owner for e in ev.effects):
            return out
        for name in ev.reads & self.cspec.aggregates.keys():
            agg = self.cspec.aggregates[name]
            terms = aggregate_terms(self.cspec, name) if agg.kind == "sum" and agg.reads == {ev.owner} else None
            if terms is not None and len({terms[code] for code in ev.sources}) == 1:
                out[name] = terms[ev.target] - terms[next(iter(ev.sources))]
        return out

    def _plan(self, ev: CompiledEvent, shape: str) -> Plan | None:
        if any(e.star is not None for e in ev.effects) or ev.params or ev.observes or ev.scope == "reader":
            return None
        same = shape in ("one", "repeat")
        page = shape == "repeat"
        writes = self._writes(ev)
        affine = self._affine(ev, page) if same else {}
        written = {n for n, _ in writes}
        owner_read = {"page": "p", "reader": "r"}.get(ev.scope, "rp")
        if page and (ev.target not in ev.sources or any(c.expr for c in ev.conjuncts
                                                        if ev.owner in array_names(c.expr))):
            return None  # repeating needs the owner to stay in a source state, unread by the guard

        stepped = {} if page else self._stepped(ev)

        def klass(e: Expr, conjunct: bool) -> str | None:
            aliased = {(n, pat) for n, pat in self._reads(e, stepped)
                       if n in written and n != (ev.owner if page else None)
                       and any(self._alias(w, pat, same, page) for wn, w in writes if wn == n)}
            steps = any(isinstance(x, Name) and x.name in stepped for x in walk(e))
            if not aliased:
                return AFFINE if steps else PRE
            if all(pat in ("r", "p") and n in affine for n, pat in aliased) and not _stepped_in_reduce(e, affine):
                return AFFINE
            if conjunct and same and "p" not in {x.name for x in walk(e) if isinstance(x, Name)} \
                    and preserved(self.cspec, ev, e):
                return ONCE
            return None

        if not page and any(self._alias(w, owner_read, same) for n, w in writes if n == ev.owner):
            return None
        conj = tuple(klass(c.expr, True) for c in ev.conjuncts)
        effs = tuple(klass(e.expr, False) for e in ev.effects)
        if None in conj or None in effs:
            return None
        ends = page and all(self._convex(c.expr, affine) for c, k in zip(ev.conjuncts, conj, strict=True)
                            if k == AFFINE) \
            and all(self._linear(e.expr, affine) for e, k in zip(ev.effects, effs, strict=True) if k == AFFINE)
        pairs = any(scope not in ("page", "reader") for scope in (ev.scope, *(e.scope for e in ev.effects)))
        exprs = [c.expr for c in ev.conjuncts] + [e.expr for e in ev.effects]
        used = {x.name for e in exprs for x in walk(e) if isinstance(x, Name)}
        return Plan(shape, conj, effs, affine, ends, pairs,  # type: ignore[arg-type]
                    {name: step for name, step in stepped.items() if name in used})

    # -- repeats decided at their ends ----------------------------------------------------------------
    # Repeating on one page, an affine read is x + k * c at the k-th firing.  An expression linear in k
    # takes its extremes at k = 0 and k = K - 1, and the set of k where a comparison of two linear
    # expressions (or a conjunction of such) holds is an interval: both ends holding means every firing
    # passes, so the batch is decided by two scalar evaluations (VectorFiring.run_ends).
    def _free(self, e: Expr, affine: dict[str, int]) -> bool:
        return not any(n in affine for n, _ in self._reads(e))

    def _linear(self, e: Expr, affine: dict[str, int]) -> bool:
        if self._free(e, affine) or (isinstance(e, Index) and e.name in affine):
            return True
        if isinstance(e, Binary) and e.op in ("+", "-"):
            return self._linear(e.left, affine) and self._linear(e.right, affine)
        if isinstance(e, Binary) and e.op == "*":
            return (self._free(e.left, affine) and self._linear(e.right, affine)) or \
                (self._free(e.right, affine) and self._linear(e.left, affine))
        return isinstance(e, Unary) and e.op == "-" and self._linear(e.operand, affine)

    def _convex(self, e: Expr, affine: dict[str, int]) -> bool:
        if self._free(e, affine):
            return True
        if isinstance(e, Compare) and e.op in ("==", "<", "<=", ">", ">="):
            return self._linear(e.left, affine) and self._linear(e.right, affine)
        return isinstance(e, BoolOp) and e.op == "and" and all(self._convex(v, affine) for v in e.values)


def _stepped_in_reduce(e: Expr, affine: dict[str, int]) -> bool:
    """Whether a stepped column is read inside a reduction's body (where the vector backend's bindings
    carry another axis, so the step of each firing is not the value's: such a conjunct is not affine)."""
    return any(isinstance(x, Index) and x.name in affine
               for node in walk(e) if isinstance(node, Reduce) for x in walk(node.body))
