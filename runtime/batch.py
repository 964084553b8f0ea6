"""Vector firings: one batch of an event decided by the vector backend, then applied (see batchplan.py
for which batches qualify and how each conjunct and effect is evaluated).

::

    source    owner states of every firing checked at once (one scalar when repeating one page)
    guard     each conjunct as its plan says: pre (numpy on the pre-state), affine (numpy with the
              stepped columns), once (the generated function, at the first firing)
    effects   numpy, every firing; bounds as whole-array comparisons
    apply     column and row writes for the whole batch (or, recording, one firing at a time)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .batchplan import AFFINE, ONCE, PRE, Plan
from .compiler import CompiledEvent
from .errors import GuardRefused

if TYPE_CHECKING:
    from .pipeline import Pipeline

__all__ = ["AFFINE", "ONCE", "PRE", "VectorFiring"]


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
            return pipe.refusals.source(ev, r, p, state)
        text = failed[1] if failed is not None else ev.guard_text
        conj = next((c for c in ev.conjuncts if c.text == text), None)
        return pipe.refusals.conjunct(ev, r, p, text, conj.reads if conj is not None else frozenset())

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
