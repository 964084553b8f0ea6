"""Forgetting pages nothing holds (spec ``forget``), and what operations in progress hold.

A page record lives while something needs it::

    live  <=>  in a reader's block table  or  pooled  or  pinned  or  has live child pages
               or  an operation in progress holds it (a copy in flight, a recovery using it)

Once none holds, ``collect`` fires ``forget`` (the spec resets the page's state; its id may be
reused), frees the payload wherever it is, removes its index entries and record, and looks at its
parent.  What operations in progress hold is ``Busy`` (``busy.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container
from itertools import starmap

import numpy as np

from .binding import BLOCK, PIN, POOL
from .busy import Busy
from .errors import GuardRefused
from .holders import NOBODY
from .index import PrefixIndex
from .pages import PageDirectory, PageRecord
from .pipeline import Pipeline
from .seam import PolicySeam
from .tiers import Storage

SHORT = 64  # up to this many pages, ``collect_many`` reads their pins and pool membership page by page
NOTHING: frozenset[int] = frozenset()  # the ``keep`` of a plain ``collect``
FIRE_FROM = 112  # fewer planned forgets: one at a time (timed in the replay: a batch ~170 us + 0.8 us a page)


class Collector:
    """Fires ``forget`` on pages nothing holds and cleans up after them."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, index: PrefixIndex, busy: Busy, storage: Storage,
                 seam: PolicySeam) -> None:
        self.pipe, self.store, self.pages, self.index = pipe, pipe.store, pages, index
        self.busy, self.storage, self.seam = busy, storage, seam
        self._pooled = pipe.cspec.codes[POOL]["pooled"]
        self.short = SHORT  # (0: ``collect_many`` gathers with numpy, whatever the length)
        self._holders = self.store.rev.get(BLOCK)  # who holds each page in a block table (None: not kept)
        self.batched = True  # clean up after a batch of forgotten pages together (``collect_in_turn``)

    def holds(self, pid: int) -> bool:
        """Whether anything keeps page ``pid`` (see the module doc)."""
        rec = self.pages.find(pid)
        return rec is not None and self._held(rec, pid)

    def _held(self, rec: PageRecord, pid: int) -> bool:
        """Whether anything keeps ``pid``, whose record is ``rec`` (``_plan`` reads it in line, with the
        children its walk counts gone)."""
        busy, cols, holders = self.busy, self.store.cols, self._holders
        return bool(rec.children > 0 or pid in busy.inflight or busy.held.get(pid, 0) > 0
                    or cols[POOL][pid] == self._pooled or cols[PIN][pid]
                    or (holders.get(pid) is not None if holders is not None else self.store.readers_at((BLOCK,), pid)))

    def collect(self, pid: int, keep: Container[int] = NOTHING, gone: list[PageRecord] | None = None) -> None:
        """Forget ``pid`` and then its ancestors, as long as nothing holds them (and not ``keep``).  With
        ``gone``, each page's record and id are dropped as it is forgotten (what the next ``holds`` and
        ``forget`` read) and the record appended to ``gone``, the rest of the cleanup left to
        ``forgotten_many``."""
        records, busy, held_by = self.pages.records, self.busy, self._held
        held = busy.held
        while pid >= 0 and pid not in keep:
            rec = records.get(pid)
            if rec is None:
                return
            if held_by(rec, pid):
                if pid in held:
                    busy.deferred.add(pid)  # collected again when the hold ends
                return
            try:
                self.pipe.fire("forget", None, pid)
            except GuardRefused:
                return  # e.g. a copy in flight the spec still sees (offloading, prefetching)
            if gone is None:
                pid = self.forgotten(pid)
                continue
            rec = self.pages.remove(pid)
            self.store.free_page(pid)
            gone.append(rec)
            pid = rec.parent

    def collect_in_turn(self, pids: list[int], keeps: list[int]) -> None:
        """``collect(pids[i], keep={keeps[i], *pids[i + 1:]})`` for each i in order (a pool's victims
        evicted in one go, each kept from the collections before its own, ``keeps`` the pages admitted
        for them, none of them among ``pids``); the forgotten pages cleaned up together at the end
        (``forgotten_many``) unless ``batched`` is off.

        ``batched``: the pages to forget are first found without firing (``_plan``: the walks page by
        page, each planned page counted out of its parent's children); at least ``FIRE_FROM`` of them
        are fired as one batch of ``forget`` (each reads and writes only its own page, so the batch
        passes exactly when each would, in this order), else, or when the batch is refused (nothing
        kept, its refusal not counted), one at a time in the planned order; at the first refusal the
        walks go on page by page from the next victim, as one at a time."""
        if not self.batched:
            self._in_turn(pids, keeps, 0, None)
            return
        stopped = self._stopped(pids, keeps)
        if stopped is not None:  # (most calls: every victim has live children) only the holds met
            self.busy.deferred.update(stopped)
            return
        plan, owner, deferred = self._plan(pids, keeps)
        if not plan:  # (every walk stopped before a page it could forget) only the holds the walks met
            self.busy.deferred.update(pid for _, pid in deferred)
            return
        gone: list[PageRecord] = []
        try:
            together = len(plan) >= FIRE_FROM and self._fire_together(plan)
            stop = len(pids)
            remove, free_page = self.pages.remove, self.store.free_page
            if together:
                gone = list(map(remove, plan))
                deque(map(free_page, plan), 0)
            else:
                fire = self.pipe.firer("forget")
                for at, pid in enumerate(plan):
                    try:
                        fire(None, pid, None, None)
                    except GuardRefused:
                        stop = owner[at]  # its walk ends here, as one at a time
                        break
                    gone.append(remove(pid))
                    free_page(pid)
            self.busy.deferred.update(pid for j, pid in deferred if j < stop)
            if stop < len(pids):
                self._in_turn(pids, keeps, stop + 1, gone)
        finally:
            if gone:
                self.forgotten_many(gone)

    def _in_turn(self, pids: list[int], keeps: list[int], start: int, gone: list[PageRecord] | None) -> None:
        """``collect_in_turn`` page by page from victim ``start`` on."""
        later = set(pids[start:])
        for pid, keep in zip(pids[start:], keeps[start:], strict=True):
            later.discard(pid)
            later.add(keep)
            self.collect(pid, later, gone)
            later.discard(keep)

    def _stopped(self, pids: list[int], keeps: list[int]) -> list[int] | None:
        """The victims a hold keeps when each walk of ``_plan`` stops at its victim at once (it has live
        children, no record, or is its keep: nothing planned, as most calls), else None."""
        get, held, out = self.pages.records.get, self.busy.held, []
        for pid, keep in zip(pids, keeps, strict=True):
            rec = get(pid)
            if rec is None or pid == keep:
                continue
            if rec.children <= 0:
                return None
            if pid in held:
                out.append(pid)
        return out

    def _plan(self, pids: list[int], keeps: list[int]) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """The walks of ``collect_in_turn`` with every ``forget`` assumed to pass and nothing changed:
        the pages to forget in order, the victim whose walk reaches each, and the held pages the walks
        stop at that a hold keeps (with their victim: deferred once the walks before it are done)."""
        records, held, inflight = self.pages.records, self.busy.held, self.busy.inflight
        pool, pin, pooled = self.store.cols[POOL], self.store.cols[PIN], self._pooled
        slots = None if self._holders is None else self._holders.slots  # (a slot a page: read, not called)
        plan: list[int] = []
        owner: list[int] = []
        deferred: list[tuple[int, int]] = []
        lost: dict[int, int] = {}  # page -> its children planned to be forgotten
        later = set(pids)
        for j, (pid, keep) in enumerate(zip(pids, keeps, strict=True)):
            later.discard(pid)
            later.add(keep)
            while pid >= 0 and pid not in later:
                rec = records.get(pid)
                if rec is None:
                    break
                gone = lost.get(pid, 0)
                if gone < 0:
                    break
                if rec.children > gone or pid in inflight or held.get(pid, 0) > 0 or pool[pid] == pooled \
                        or pin[pid] or (slots[pid] != NOBODY if slots is not None
                                        else self.store.readers_at((BLOCK,), pid)):  # ``_held`` in line
                    if pid in held:
                        deferred.append((j, pid))
                    break
                plan.append(pid)
                owner.append(j)
                lost[pid] = -1  # planned: no record any more
                pid = rec.parent
                lost[pid] = lost.get(pid, 0) + 1
            later.discard(keep)
        return plan, owner, deferred

    def _fire_together(self, plan: list[int]) -> bool:
        """Fire ``forget`` on the pages ``plan`` as one batch; False, with nothing changed and the
        refusal not counted, when it is refused."""
        try:
            with self.pipe.tentative(("forget",)):
                self.pipe.fire_batch("forget", None, np.asarray(plan, dtype=np.int64), distinct=True)
        except GuardRefused:
            return False
        return True

    def collect_many(self, pids: np.ndarray | list[int]) -> None:
        """``collect`` each of ``pids`` in order, skipping at once the pages a pin or the pool holds (read
        page by page for a list or up to ``short`` pages, numpy's fixed cost being more; 0: an array
        always gathered)."""
        cols, vecs, pooled = self.store.cols, self.store.vecs, self._pooled
        if pids.__class__ is list or len(pids) <= self.short:
            pin, pool = cols[PIN], cols[POOL]
            free = [pid for pid in (pids if isinstance(pids, list) else pids.tolist())
                    if not pin[pid] and pool[pid] != pooled]
        else:
            free = pids[(vecs[PIN][pids] == 0) & (vecs[POOL][pids] != pooled)].tolist()
        collect = self.collect
        for pid in free:
            collect(pid)

    def forgotten(self, pid: int) -> int:
        """Clean up after ``forget`` fired on ``pid``: payload, index entries, record, id; returns its
        parent's id."""
        rec = self.pages.remove(pid)
        self.storage.release(rec)
        if rec.hash is not None:
            self.unindex(rec)
        self.index.remove_child(rec.parent_hash, pid)
        self.index.forget(pid)
        self.store.free_page(pid)
        self.seam.removed(rec)
        return rec.parent

    def forgotten_many(self, recs: list[PageRecord]) -> None:
        """``forgotten`` for pages ``forget`` fired on in this order, whose records and ids are already
        dropped (``collect``): the payloads freed and the disk records cleared together; the index entries
        removed at once when none of the pages has a sealed duplicate (then nothing takes over between
        them), else looked at page by page in order (each page still to come counted as live by a
        duplicate search, as it is one at a time; the entries removed at once up to each takeover by a
        duplicate); the continuations, sealed rows and the policy's entries dropped together."""
        self.storage.release_many(recs)
        index, by_hash, kids, find = self.index, self.index.by_hash, self.index.kids, self.pages.find
        dropped = [(rec.hash, rec.pid) for rec in recs if rec.hash is not None and by_hash.get(rec.hash) == rec.pid]
        takeover = not all(starmap(kids.alone, dropped))  # none: the entries as they stood, removed at once
        if takeover:  # else page by page
            dropped = []
        for at, rec in enumerate(recs if takeover else ()):
            pid, h = rec.pid, rec.hash
            if h is None or by_hash.get(h) != pid:
                continue
            dropped.append((h, pid))
            if kids.alone(h, pid):
                continue
            later = {r.pid: r for r in recs[at + 1:]}  # the pages still to come (rare: a sealed duplicate)

            def hash_of(other: int, later: dict[int, PageRecord] = later) -> int | None:
                got = find(other) or later.get(other)
                return None if got is None else got.hash

            other = kids.duplicate(h, rec.parent_hash, pid, hash_of)
            if other is not None:
                index.remove_sealed_many(dropped)
                dropped = []
                index.add_sealed(h, other)
        index.remove_sealed_many(dropped)
        index.forget_many([(rec.parent_hash, rec.pid) for rec in recs])
        self.seam.removed_many(recs)

    def unindex(self, rec: PageRecord) -> None:
        """Remove the index entry of ``rec``; a sealed duplicate with the same hash takes over."""
        h = rec.hash
        if h is None or self.index.by_hash.get(h) != rec.pid:
            return
        self.index.remove_sealed(h, rec.pid)
        find = self.pages.find
        other = self.index.kids.duplicate(h, rec.parent_hash, rec.pid,
                                          lambda pid: None if (got := find(pid)) is None else got.hash)
        if other is not None:
            self.index.add_sealed(h, other)
