"""Vector firings: one batch of an event decided by the vector backend, then applied (see batchplan.py
for which batches qualify and how each conjunct and effect is evaluated).

::

    source    owner states of every firing checked at once (one scalar when repeating one page)
    guard     each conjunct as its plan says: pre (numpy on the pre-state), affine (numpy with the
              stepped columns), once (the generated function, at the first firing)
    effects   numpy, every firing; bounds as whole-array comparisons
    apply     column and row writes for the whole batch (or, recording, one firing at a time)

A repeat on one page whose affine conjuncts are convex in the firing's number is decided by the
generated functions at its first and last firing (``run_ends``).  A refused all-or-none batch is
fired again one by one, so its refusal is exactly a single firing's.  Firings each decided on their
own whose guard reads an aggregate they move are *counted* (``_counted``).  This module is longer than
most: the stages over arrays and their three special cases (ends, counted, recorded) read best together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .batchplan import AFFINE, ONCE, PRE, Plan
from .compiler import CompiledEvent

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


class _Shift:
    """A column seen at the last firing of a repeat: ``base[i] + delta``."""

    def __init__(self, base: Any, delta: int) -> None:
        self.base = base
        self.delta = delta

    def __getitem__(self, i: Any) -> Any:
        return self.base[i] + self.delta


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
        counted = not atomic and not plan.independent  # firings on their own, but for stepped aggregates
        if (not self.distinct and plan.shape != "repeat" and len(np.unique(self.p)) != self.count) \
                or (plan.shape == "many" and not self.distinct and len(np.unique(self.r)) != self.count) \
                or (counted and not plan.counted):
            return pipe.fire_each(ev, self.r, self.p, self.count, atomic)
        if plan.ends and not pipe.recorder.enabled:
            self.run_ends()
            return np.ones(self.count, dtype=bool)
        store = pipe.store
        repeat = plan.shape == "repeat"  # one page: what does not step is one scalar for every firing
        n = dict(pipe.names.bind(ev, self.r, int(self.p[0]) if repeat else self.p, None, None))
        if counted and self._none_fire(n):
            return np.zeros(self.count, dtype=bool)
        pre = store.varrays
        moved, stepped = pre, n  # what the affine classes read: the columns and aggregates each firing steps
        if plan.affine or plan.stepped:
            steps = np.arange(self.count, dtype=np.int64)
            moved = dict(pre)
            for name, inc in plan.affine.items():  # seen at the k-th firing
                moved[name] = _Affine(store.rvecs[name] if name in store.rvecs else store.vecs[name], steps * inc)
            stepped = self._stepped(n, steps)
        if repeat:
            ok = np.full(self.count, pipe.owner_state(ev, self.r, int(self.p[0])) in pipe.sources[ev.name])
        else:
            ok = pipe.source_table[ev.name][self._owner_codes()]  # each owner's state looked up (a fresh array)
        later = []  # counted: the affine conjuncts, decided once the others are
        for c, klass in zip(ev.conjuncts, plan.conjuncts, strict=True):
            if klass == ONCE or (repeat and klass == PRE):
                first = n if repeat else pipe.names.bind(ev, self.r, int(self.p[0]), None, None)
                value: Any = bool(c.fn(first, store.arrays))
            elif klass == AFFINE:
                if counted:
                    later.append(c)
                    continue
                value = c.vfn(stepped, moved)
            else:
                value = c.vfn(n, pre)
            if value.__class__ is not np.ndarray:  # one truth for every firing (a reader's, a constant's)
                if not value:
                    ok[:] = False
                continue
            np.logical_and(ok, value, out=ok)  # an int column's truth read in the same pass (no cast first)
        values: list[Any] = []  # per effect: an array of one value per firing, or one int for every firing
        extremes: list[tuple[Any, Any] | None] = []  # each value's (min, max) where the bounds read both
        bounds = pipe.write_plan(ev.name)
        for eff, klass, (_, _, lo, hi) in zip(ev.effects, plan.effects, bounds, strict=True):
            value = eff.vfn(stepped, moved) if klass == AFFINE else eff.vfn(n, pre)
            if value.__class__ is not np.ndarray or value.shape != (self.count,):
                if value.__class__ is not np.ndarray or not value.ndim:  # one value for every firing (a
                    # constant): its bounds checked once
                    value = int(value)
                    if (lo is not None and value < lo) or (hi is not None and value > hi):
                        ok[:] = False
                    extremes.append((value, value))
                    values.append(value)
                    continue
                value = np.broadcast_to(value, (self.count,))
            low = _MIN(value) if lo is not None else None  # the ufuncs' reductions: no Python wrapper
            high = _MAX(value) if hi is not None else None
            extremes.append((low, high) if lo is not None and hi is not None else None)
            if (lo is not None and low < lo) or (hi is not None and high > hi):  # some out
                inside = np.ones(self.count, dtype=bool)
                if lo is not None:
                    inside &= value >= lo
                if hi is not None:
                    inside &= value <= hi
                ok &= inside
            values.append(value)
        if later:
            decided = self._counted(ok, later, n)
            if decided is None:
                return pipe.fire_each(ev, self.r, self.p, self.count, atomic)
            ok = decided
        if atomic and not _ALL(ok):
            return self._refuse()
        if plan.shape == "many" or not atomic:
            self._apply(ok, values)
        else:
            self._apply(None, values, extremes)  # every firing fires
        return ok

    def _stepped(self, n: dict[str, Any], before: np.ndarray) -> dict[str, Any]:
        """The names with each stepped aggregate as the firings see it: moved by its step once for each of
        ``before`` (per firing: the firings before it that fired)."""
        out = dict(n)
        for name, step in self.plan.stepped.items():
            out[name] = n[name] + before * step
        return out

    def _none_fire(self, n: dict[str, Any]) -> bool:
        """Whether an affine conjunct (reading stepped aggregates) is false for every firing at the
        aggregates as they are (the pool full): then no firing fires, each seeing them unmoved."""
        pre = self.pipe.store.varrays
        for c, klass in zip(self.ev.conjuncts, self.plan.conjuncts, strict=True):
            if klass == AFFINE:
                value = c.vfn(n, pre)
                if value.__class__ is not np.ndarray and not value:
                    return True
        return False

    def _counted(self, ok: np.ndarray, conjuncts: list[Any], n: dict[str, Any]) -> np.ndarray | None:
        """Firings each decided on its own whose affine conjuncts read stepped aggregates: firing k sees
        them moved by the firings before it that fired, which depends on their outcomes.  Guess the
        outcomes, evaluate with the counts they give, and keep a guess that reproduces itself: each
        firing's outcome is then the one it has after the outcomes before it, firing by firing
        (by induction on k).  Two guesses (every passing firing fires; then what that gave); None if
        neither holds (the batch fires one by one)."""
        pre, guess = self.pipe.store.varrays, ok
        for _ in range(2):
            names = self._stepped(n, np.cumsum(guess) - guess)
            got = ok.copy()
            for c in conjuncts:
                np.logical_and(got, c.vfn(names, pre), out=got)
            if np.array_equal(got, guess):
                return got
            guess = got
        return None

    def run_ends(self) -> None:
        """A repeat whose affine conjuncts and effects are convex and linear in k (batchplan.py): decided
        by the generated functions at the first and the last firing; applies what the last leaves."""
        pipe, ev, plan = self.pipe, self.ev, self.plan
        r, p, last = self.r, int(self.p[0]), self.count - 1
        n = pipe.names.bind(ev, r, p, None, None)
        if pipe.owner_state(ev, r, p) not in pipe.sources[ev.name]:
            self._refuse()
            return
        first = pipe.store.arrays
        end = dict(first)
        for name, inc in plan.affine.items():
            end[name] = _Shift(first[name], last * inc)
        for c, klass in zip(ev.conjuncts, plan.conjuncts, strict=True):
            if not c.fn(n, first) or (klass == AFFINE and not c.fn(n, end)):
                self._refuse()
                return
        writes = []
        for eff, klass, (_, kind, lo, hi) in zip(ev.effects, plan.effects, pipe.write_plan(ev.name), strict=True):
            values = (eff.fn(n, first), eff.fn(n, end)) if klass == AFFINE else (eff.fn(n, first),)
            if any((lo is not None and v < lo) or (hi is not None and v > hi) for v in values):
                self._refuse()
                return
            writes.append((eff.target, kind, None, _py(values[-1])))
        pipe.apply_firing(ev, r, p, ev.target, writes)
        pipe.count(ev.name, self.count)
        pipe.vector_firings += self.count

    def _owner_codes(self) -> np.ndarray:
        store, ev = self.pipe.store, self.ev
        if ev.scope == "page":
            return store.vecs[ev.owner][self.p]
        return store.varrays[ev.owner][(self.r if self.r is not None else 0, self.p)]  # type: ignore[no-any-return]

    def _refuse(self) -> np.ndarray:
        """Some firing of an all-or-none batch is refused: fire the batch one by one (in a transaction
        rolled back on the refusal), so the refusal names the firing, the conjunct and the values exactly
        as a single firing does.  Refusals are rare; the single firings are the authority (should they
        all pass, the batch has fired)."""
        return self.pipe.fire_each(self.ev, self.r, self.p, self.count, True)

    def _apply(self, mask: np.ndarray | None, values: list[np.ndarray],
               extremes: list[tuple[Any, Any] | None] | None = None) -> None:
        """Write the firings of ``mask`` (None: every firing); ``extremes``, each value's (min, max) where
        known (every firing fires)."""
        pipe, ev, plan = self.pipe, self.ev, self.plan
        if pipe.recorder.enabled:
            self._apply_recorded(np.ones(self.count, dtype=bool) if mask is None else mask, values)
            return
        idx = None if mask is None or mask.all() else np.flatnonzero(mask)  # None: every firing (no index)
        fired = self.count if idx is None else len(idx)
        if not fired:
            return
        if plan.shape == "repeat":
            self._apply_repeat(values)
            return
        pids = self.p if idx is None else self.p[idx]
        rids = None if self.r is None else (self.r if plan.shape == "one" or idx is None else self.r[idx])
        pid_list = pids.tolist() if isinstance(rids, np.ndarray) and plan.pair_writes else None  # one write a pair
        if pipe.sources[ev.name] != {ev.target} or ev.owner in pipe.watchers:  # else every owner is at the
            pipe.write_many(ev.owner, ev.scope, rids, pids, ev.target, pid_list)  # target already: no change
        for k, (eff, value) in enumerate(zip(ev.effects, values, strict=True)):
            if value.__class__ is int:  # one value for every firing
                pipe.write_many(eff.target, eff.scope, rids, None if eff.scope == "reader" else pids, value, pid_list)
                continue
            if eff.scope == "reader" and plan.shape == "one":
                pipe.write_many(eff.target, "reader", rids, None, int(value[-1]))
                continue
            vals = value if idx is None else value[idx]
            known = extremes[k] if extremes is not None else None
            if eff.scope != "page" and len(vals) > 8 and vals[0] == vals[-1] and (
                    known[0] == known[1] if known is not None else _MIN(vals) == _MAX(vals)):
                pipe.write_many(eff.target, eff.scope, rids, pids, int(vals[0]), pid_list)  # one value for all
            else:
                pipe.write_many(eff.target, eff.scope, rids, pids, vals, pid_list)
        pipe.names.inc.after(ev, rids, pids)
        pipe.count(ev.name, fired)
        pipe.vector_firings += fired

    def _apply_repeat(self, values: list[np.ndarray]) -> None:
        """The same reader and page every time: what the last firing leaves is what stays."""
        pipe, ev = self.pipe, self.ev
        r, p = self.r, int(self.p[0])
        writes = [(eff.target, {"p": "p", "r": "r", "r,p": "rp"}[eff.index], None, _at(value, -1))
                  for eff, value in zip(ev.effects, values, strict=True)]
        pipe.apply_firing(ev, r, p, ev.target, writes)
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
            writes = [(eff.target, {"p": "p", "r": "r", "r,p": "rp"}[eff.index], None, _at(value, k))
                      for eff, value in zip(ev.effects, values, strict=True)]
            pipe.apply_firing(ev, r, p, ev.target, writes)
            pipe.count(ev.name, 1)
            pipe.vector_firings += 1
            pipe.recorder.after(ev, r, p, None, proj)


_MIN, _MAX, _ALL = np.minimum.reduce, np.maximum.reduce, np.logical_and.reduce


def _at(value: Any, k: int) -> Any:
    """The value firing ``k`` writes: one of an array's, or the one int every firing writes."""
    return value if value.__class__ is int else _py(value[k])


def _py(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value
