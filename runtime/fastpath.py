"""Fast paths of ``Core.fire``: the same source check, guard, bounds and effects, with less overhead.

- *memo*: a local event's outcome (refusal, or the values its effects write) is a function of the
  page's own values, so it is computed once per distinct tuple of them by the compiled guard and
  effects (``Core._evaluate``) and looked up afterwards (acquire, read, release, compress ...);
- *direct*: a view event whose expressions only index ``x[p]`` reads the page table at the page id
  (``@pid``), without a per-sequence view of the columns, when one sequence holds the page (open,
  append, seal on the page being written);
- batches of either (``fire_batch``: the pages of a lease; ``fire_own_many``: one decoding step).

Recording, strict mode and the ``transitions`` backend always take the general path.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import TYPE_CHECKING, Any

from morphcache.spec.model import PAGE

from .compiler import LOCAL, PID, CompiledEvent
from .errors import GuardRefused
from .views import View

if TYPE_CHECKING:
    from .core import Core, Sequence


class FastPaths:
    """Memo tables and write plans of one Core, and the fast firing routines."""

    def __init__(self, core: Core, backend: str) -> None:
        self.core = core
        self.memo: dict[tuple[Any, ...], Any] = {}
        self.memo_reads: dict[str, list[list[Any]]] = {}
        if not core.strict:
            for name, ev in core.events.items():
                constant_bounds = all(isinstance(e.lo, (int, type(None))) and isinstance(e.hi, (int, type(None)))
                                      for e in ev.effects)
                if ev.mode == LOCAL and not ev.params and constant_bounds:
                    self.memo_reads[name] = [core.cols[v] for v in sorted(ev.reads)]
        self.direct_plans: dict[str, tuple[CompiledEvent, frozenset[Any]]] = {}
        self.direct_ops: dict[str, list[tuple[Any, ...]]] = {}
        for name, ev in core.events.items():
            if ev.direct and not ev.params and not core.strict and backend == "table":
                sources = frozenset(s for (o, e, s) in core.table if e == name and o == ev.owner)
                self.direct_plans[name] = (ev, sources)
                self.direct_ops[name] = [
                    (e.fn, e.lo, e.hi, e.target, None if e.system else core.cols[e.target],
                     e.target in core.pages.mask_vars, e.target in core.pages.agg_vars) for e in ev.effects]
        self.write_plans: dict[str, list[tuple[list[Any] | None, bool, bool]]] = {}
        self.write_targets: dict[str, list[str]] = {}
        for name, ev in core.events.items():
            if ev.scope == PAGE:
                targets = [ev.owner, *(e.target for e in ev.effects)]
                self.write_plans[name] = [(core.cols.get(t), t in core.pages.mask_vars, t in core.pages.agg_vars)
                                          for t in targets]  # col None: a system variable
                self.write_targets[name] = targets

    def fire(self, ev: CompiledEvent, pid: int, state: Any) -> bool:
        """Fire ``ev`` on ``pid`` on a fast path if one applies (source state already checked);
        False when the caller must take the general path."""
        reads = self.memo_reads.get(ev.name)
        if reads is not None:
            self._fire_memo(ev, pid, state, reads)
            return True
        if ev.direct and not self.core.strict:
            seqs = self.core.pages.info[pid].seqs
            if len(seqs) == 1:
                self._fire_direct1(ev, pid, next(iter(seqs.values())).view)  # type: ignore[attr-defined]
                return True
        return False

    def fire_own(self, name: str, pid: int, seq: Sequence) -> None:
        """``fire(name, pid, seq)`` for a page that only ``seq`` holds (its page being written: open,
        append, seal): the same source check, guard, bounds and effects on the direct path."""
        plan = self.direct_plans.get(name)
        if plan is None or self.core.recorder.enabled or len(self.core.pages.info[pid].seqs) != 1:
            self.core.fire(name, pid, seq)
            return
        ev, sources = plan
        if self.core.cols[ev.owner][pid] not in sources:
            self.core.fire(name, pid, seq)  # raises the source-state refusal
            return
        self._fire_direct1(ev, pid, seq.view)

    def fire_own_many(self, name: str, pids: Seq[int], seqs: Seq[Sequence]) -> int:
        """``fire_own`` for many (page, sequence) pairs, e.g. one ``append`` per decoding sequence;
        stops at the first pair that does not take the direct path or is refused and returns its index
        (``len(pids)`` when all fired)."""
        plan = self.direct_plans.get(name)
        if plan is None or self.core.recorder.enabled:
            return 0
        ev, sources = plan
        owner_col = self.core.cols[ev.owner]
        conj = [c.fn for c in ev.conjuncts]
        ops = self.direct_ops[name]
        info, cols, masks = self.core.pages.info, self.core.cols, self.core.pages.masks
        ocol, omask, oagg = self.write_plans[name][0]
        target = ev.target
        bound_cache: dict[tuple[int, int], Any] = {}
        fns = [op[0] for op in ops]
        checks = [(k, op[1], op[2]) for k, op in enumerate(ops) if op[1] is not None or op[2] is not None]
        sys_writes = [(k, op[3]) for k, op in enumerate(ops) if op[4] is None]
        page_writes = [(k, op[4], op[5], op[6]) for k, op in enumerate(ops) if op[4] is not None]
        dirty = self.core.pages.dirty_agg
        for i, pid in enumerate(pids):
            page = info[pid]
            if owner_col[pid] not in sources or len(page.seqs) != 1:
                self.core.fired[name] += i
                return i
            view = seqs[i].view
            n = view.names
            n["p"] = page.depth
            n[PID] = pid
            for fn in conj:
                if not fn(n, cols):
                    self.core.fired[name] += i
                    return i
            values = [fn(n, cols) for fn in fns]
            for k, lo, hi in checks:
                value = values[k]
                if lo is not None and value < (lo if lo.__class__ is int else lo(n, view.arrays)):
                    self.core.fired[name] += i
                    return i
                if hi is not None:
                    high: Any
                    if hi.__class__ is int:
                        high = hi
                    else:
                        key = (k, n["pages"])  # a bound reads constants and the view's page count only
                        high = bound_cache.get(key)
                        if high is None:
                            high = bound_cache[key] = hi(n, view.arrays)
                    if value > high:
                        self.core.fired[name] += i
                        return i
            ocol[pid] = target  # type: ignore[index]
            if omask:
                masks[pid] = None
            if oagg:
                dirty.add(pid)
            for k, t in sys_writes:
                n[t] = values[k]
            for k, col, mflag, aflag in page_writes:
                col[pid] = values[k]
                if mflag:
                    masks[pid] = None
                if aflag:
                    dirty.add(pid)
        self.core.fired[name] += len(pids)
        return len(pids)

    def _fire_direct1(self, ev: CompiledEvent, pid: int, view: View) -> None:
        """A view event on a page held by one sequence (the decode hot path): guard, bounds and
        effects evaluated against the page table directly, then applied."""
        n, cols = view.names, self.core.cols
        n["p"] = self.core.pages.info[pid].depth
        n[PID] = pid
        for c in ev.conjuncts:
            if not c.fn(n, cols):
                self.core.refused[ev.name] += 1
                raise self.core._refusal(ev, pid, view)
        ops = self.direct_ops[ev.name]
        values = [fn(n, cols) for fn, *_ in ops]
        for (_, lo, hi, target, _col, _m, _a), value in zip(ops, values, strict=True):
            if (lo is not None and (lo.__class__ is not int or value < lo)) or (
                    hi is not None and (hi.__class__ is not int or value > hi)):
                self.core._bounds(ev, target, lo, hi, value, pid, view)
        masks = self.core.pages.masks
        col, mflag, aflag = self.write_plans[ev.name][0]
        col[pid] = ev.target  # type: ignore[index]
        if mflag:
            masks[pid] = None
        if aflag:
            self.core.pages.dirty_agg.add(pid)
        for (_, _lo, _hi, target, col, mflag, aflag), value in zip(ops, values, strict=True):
            if col is None:
                n[target] = value
                continue
            col[pid] = value
            if mflag:
                masks[pid] = None
            if aflag:
                self.core.pages.dirty_agg.add(pid)
        self.core.fired[ev.name] += 1

    def _fire_memo(self, ev: CompiledEvent, pid: int, state: Any, reads: list[list[Any]]) -> None:
        """A local event: its outcome is a function of the page's own values, so it is evaluated once
        per distinct input (with the compiled guard and effects) and remembered."""
        hit = self._memo_hit(ev, pid, state, reads)
        if hit is False:
            self.core.refused[ev.name] += 1
            raise self.core._refusal(ev, pid, self.core._first_view(ev, pid, None))
        assert isinstance(hit, tuple)
        self._memo_apply(ev, pid, hit)
        self.core.fired[ev.name] += 1

    def _memo_hit(self, ev: CompiledEvent, pid: int, state: Any, reads: list[list[Any]]
                  ) -> tuple[Any, ...] | bool:
        key = (ev.name, state, *[col[pid] for col in reads])
        hit: tuple[Any, ...] | bool | None = self.memo.get(key)
        if hit is None:
            try:
                page_w, _ = self.core._evaluate(ev, pid, [self.core.gview], None)
                hit = tuple(value for _, _, value in page_w)
            except GuardRefused:
                hit = False
            if len(self.memo) > 100_000:
                self.memo.clear()
            self.memo[key] = hit
        return hit

    def _memo_apply(self, ev: CompiledEvent, pid: int, values: tuple[Any, ...]) -> None:
        masks, dirty = self.core.pages.masks, self.core.pages.dirty_agg
        for (col, mflag, aflag), value in zip(self.write_plans[ev.name], (ev.target, *values), strict=True):
            assert col is not None
            col[pid] = value
            if mflag:
                masks[pid] = None
            if aflag:
                dirty.add(pid)

    def fire_batch(self, names: str | list[str], pids: Seq[int]) -> int:
        """Fire local events on many pages (``names`` one event, or one per page); stops at the first
        refusal and returns its index (``len(pids)`` when all fired).  Call ``fire`` on the refused page
        to get the refusal."""
        single = isinstance(names, str)
        if not single or self.core.machine is not None or self.core.recorder.enabled or names not in self.memo_reads:
            for i, pid in enumerate(pids):
                try:
                    self.core.fire(names if isinstance(names, str) else names[i], pid)
                except GuardRefused:
                    return i
            return len(pids)
        assert isinstance(names, str)
        ev = self.core.events[names]
        reads = self.memo_reads[names]
        owner, target = ev.owner, ev.target
        owner_col = self.core.cols[owner]
        table, memo = self.core.table, self.memo
        plan = self.write_plans[names]
        masks, dirty = self.core.pages.masks, self.core.pages.dirty_agg
        for i, pid in enumerate(pids):
            state = owner_col[pid]
            if (owner, names, state) not in table:
                self.core.fired[names] += i
                return i
            hit = memo.get((names, state, *[col[pid] for col in reads]))
            if hit is None:
                hit = self._memo_hit(ev, pid, state, reads)
            if hit is False or hit is True:
                self.core.fired[names] += i
                return i
            for (col, mflag, aflag), value in zip(plan, (target, *hit), strict=True):
                col[pid] = value  # type: ignore[index]
                if mflag:
                    masks[pid] = None
                if aflag:
                    dirty.add(pid)
        self.core.fired[names] += len(pids)
        return len(pids)
