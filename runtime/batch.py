"""Batches: one event fired on many pages (or for many readers) decided by the vector backend at once.

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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from morphcache.spec.expr import Binary, Const, Expr, Index, Name, Reduce, walk

from .irtools import array_names

from .compiler import CompiledEvent, CompiledSpec
from .domains import PAGE_READERS, READER_PAGES
from .errors import GuardRefused
from .preserve import preserved

if TYPE_CHECKING:
    from .pipeline import Pipeline

PRE, AFFINE, ONCE = "pre", "affine", "once"


@dataclass(frozen=True)
class Plan:
    """How a batch of one event and shape is evaluated: a class per conjunct and per effect."""

    shape: str
    conjuncts: tuple[str, ...]
    effects: tuple[str, ...]
    affine: dict[str, int]  # reader variable -> its increment per firing (shape "one")

    @property
    def independent(self) -> bool:
        """Each firing's outcome is its own (no affine or once class): may fire non-atomically."""
        return all(c == PRE for c in self.conjuncts + self.effects)


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
    def _reads(self, e: Expr) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        domains = self.cspec.domains
        for node in walk(e):
            if isinstance(node, Index):
                out.add((node.name, self._pattern(node, e)))
            elif isinstance(node, Name) and node.name in self.cspec.aggregates:
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

        def klass(e: Expr, conjunct: bool) -> str | None:
            aliased = {(n, pat) for n, pat in self._reads(e) if n in written and n != (ev.owner if page else None)
                       and any(self._alias(w, pat, same, page) for wn, w in writes if wn == n)}
            if not aliased:
                return PRE
            if all(pat in ("r", "p") and n in affine for n, pat in aliased):
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
        return Plan(shape, conj, effs, affine)  # type: ignore[arg-type]


class _Affine:
    """A column seen at the k-th firing of a batch that steps it: ``base[i] + k * step``."""

    def __init__(self, base: np.ndarray, steps: np.ndarray) -> None:
        self.base = base
        self.steps = steps

    def __getitem__(self, i: Any) -> Any:
        return self.base[i] + self.steps


class VectorFiring:
    """One batch decided by the vector backend: the pipeline's stages over arrays."""

    def __init__(self, pipe: Pipeline, ev: CompiledEvent, plan: Plan, r: Any, p: np.ndarray, count: int,
                 distinct: bool = False) -> None:
        self.pipe, self.ev, self.plan = pipe, ev, plan
        self.distinct = distinct
        self.r: Any = int(r) if plan.shape in ("one", "repeat") else (
            None if r is None else np.asarray(r, dtype=np.int64))
        self.p = np.asarray(p, dtype=np.int64)
        self.count = count

    def run(self, atomic: bool) -> np.ndarray:
        """Decide and apply the batch; returns the mask of firings that fired."""
        pipe, ev, plan = self.pipe, self.ev, self.plan
        if (not self.distinct and plan.shape != "repeat" and len(np.unique(self.p)) != self.count) \
                or (plan.shape == "many" and len(np.unique(self.r)) != self.count) \
                or (not atomic and not plan.independent):
            return pipe._fire_each(ev, self.r, self.p, self.count, atomic)
        store = pipe.store
        repeat = plan.shape == "repeat"  # one page: what does not step is one scalar for every firing
        n = dict(pipe.names.bind(ev, self.r, int(self.p[0]) if repeat else self.p, None, None))
        steps = np.arange(self.count, dtype=np.int64)
        pre = store.varrays
        moved = dict(pre)
        for name, inc in plan.affine.items():
            moved[name] = _Affine(store.rvecs[name] if name in store.rvecs else store.vecs[name], steps * inc)
        if repeat:
            ok = np.full(self.count, pipe._owner_state(ev, self.r, int(self.p[0])) in pipe.sources[ev.name])
        else:
            ok = np.isin(self._owner_codes(), np.fromiter(pipe.sources[ev.name], dtype=np.int64))
        failed: tuple[int, str] | None = None
        for c, klass in zip(ev.conjuncts, plan.conjuncts, strict=True):
            if klass == ONCE or (repeat and klass == PRE):
                first = n if repeat else pipe.names.bind(ev, self.r, int(self.p[0]), None, None)
                value: Any = bool(c.fn(first, store.arrays))
            else:
                value = c.vfn(n, moved if klass == AFFINE else pre)
            value = np.broadcast_to(np.asarray(value, dtype=bool), (self.count,))
            if failed is None and not value.all():
                failed = (int(np.argmin(value)), c.text)
            ok &= value
        values = []
        bounds = pipe.write_plan(ev.name)
        for eff, klass, (_, _, lo, hi) in zip(ev.effects, plan.effects, bounds, strict=True):
            value = np.broadcast_to(np.asarray(eff.vfn(n, moved if klass == AFFINE else pre)), (self.count,))
            inside = np.ones(self.count, dtype=bool)
            if lo is not None:
                inside &= value >= lo
            if hi is not None:
                inside &= value <= hi
            if failed is None and not inside.all():
                failed = (int(np.argmin(inside)), f"{lo} <= {eff.target} <= {hi}")
            ok &= inside
            values.append(value)
        if atomic and not ok.all():
            k = int(np.argmin(ok))
            raise self._refusal(k, failed)
        if plan.shape == "many" or not atomic:
            self._apply(ok, values)
        else:
            self._apply(np.ones(self.count, dtype=bool), values)
        return ok

    def _owner_codes(self) -> np.ndarray:
        store, ev = self.pipe.store, self.ev
        if ev.scope == "page":
            return store.vecs[ev.owner][self.p]
        return store.varrays[ev.owner][(self.r if self.r is not None else 0, self.p)]  # type: ignore[no-any-return]

    def _refusal(self, k: int, failed: tuple[int, str] | None) -> GuardRefused:
        pipe, ev = self.pipe, self.ev
        r = self.r if self.plan.shape in ("one", "repeat") else (None if self.r is None else int(self.r[k]))
        p = int(self.p[k])
        pipe.refused[ev.name] += 1
        state = pipe._owner_state(ev, r, p)
        if state not in pipe.sources[ev.name] and (failed is None or failed[0] >= k):
            pipe.refused[ev.name] -= 1
            return pipe._source_refusal(ev, r, p, state)
        text = failed[1] if failed is not None else ev.guard_text
        conj = next((c for c in ev.conjuncts if c.text == text), None)
        detail = ", ".join(pipe.values(conj.reads, r, p)) if conj is not None else ""
        cls = pipe.refusal_class(conj.reads if conj is not None else frozenset(), r, p)
        return cls(ev.name, p, pipe._block(p), pipe.describe(r), ev.guard_text, text, detail)

    def _apply(self, mask: np.ndarray, values: list[np.ndarray]) -> None:
        pipe, ev, plan = self.pipe, self.ev, self.plan
        if pipe.recorder.enabled:
            self._apply_recorded(mask, values)
            return
        idx = np.flatnonzero(mask)
        if not len(idx):
            return
        if plan.shape == "repeat":
            self._apply_repeat(values)
            return
        pids = self.p if len(idx) == self.count else self.p[idx]
        pid_list = pids.tolist()
        rids = None if self.r is None else (self.r if plan.shape == "one" else self.r[idx])
        pipe.write_many(ev.owner, ev.scope, rids, pids, ev.target, pid_list)
        for eff, value in zip(ev.effects, values, strict=True):
            if eff.scope == "reader" and plan.shape == "one":
                pipe.write_many(eff.target, "reader", rids, None, int(value[-1]))
                continue
            vals = value if len(idx) == self.count else value[idx]
            if len(vals) > 8 and vals[0] == vals[-1] and vals.min() == vals.max():
                pipe.write_many(eff.target, eff.scope, rids, pids, int(vals[0]), pid_list)  # one value for all
            else:
                pipe.write_many(eff.target, eff.scope, rids, pids, vals, pid_list)
        pipe.names.inc.after(ev, rids, pids)
        pipe.count(ev.name, len(idx))
        pipe.vector_firings += len(idx)

    def _apply_repeat(self, values: list[np.ndarray]) -> None:
        """The same reader and page every time: what the last firing leaves is what stays."""
        pipe, ev = self.pipe, self.ev
        r, p = self.r, int(self.p[0])
        writes = [(eff.target, {"p": "p", "r": "r", "r,p": "rp"}[eff.index], None, _py(value[-1]))
                  for eff, value in zip(ev.effects, values, strict=True)]
        pipe._apply(ev, r, p, ev.target, writes)
        pipe.count(ev.name, self.count)
        pipe.vector_firings += self.count

    def _apply_recorded(self, mask: np.ndarray, values: list[np.ndarray]) -> None:
        """With recording on: the decisions and values above, applied one firing at a time so that
        each step is recorded against the state it fired from."""
        pipe, ev = self.pipe, self.ev
        for k in np.flatnonzero(mask).tolist():
            r = self.r if self.plan.shape in ("one", "repeat") else (None if self.r is None else int(self.r[k]))
            p = int(self.p[k])
            n = pipe.names.bind(ev, r, p, None, None)
            proj = pipe.recorder.before(ev, r, p, n)
            writes = [(eff.target, {"p": "p", "r": "r", "r,p": "rp"}[eff.index], None, _py(value[k]))
                      for eff, value in zip(ev.effects, values, strict=True)]
            pipe._apply(ev, r, p, ev.target, writes)
            pipe.count(ev.name, 1)
            pipe.vector_firings += 1
            pipe.recorder.after(ev, r, p, None, proj)


def _py(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
