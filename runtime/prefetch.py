"""Prefetch: a host or disk page copied back into a reserved GPU slot on a worker thread, and the spec
deciding whether it lands::

    prefetch   host|disk --prefetch--> prefetching   slot reserved (room made by the policy's victims)
    worker     read the copy (outside the lock), write it into the slot (a recovery starts its copies
               once it let the lock go, one job a worker: a worker woken while the lock is held only
               waits for it; the copies queued together share one future, done when the last has
               landed); a recovery that waits for up to ``inline_copies`` copies copies and lands them
               itself before it lets the lock go (``prefetch_here``): no hand-off, no future
    then       copy_done -> verify (the checksum measured: ``intact`` observed) -> land | corrupt
               the source copy is deleted (a file that cannot be is a counted leftover)

While the copy is in flight the page is ``Busy``: nothing forgets it, and ``check_integrity`` accepts
its payload both in the slot and at its source.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from .binding import GEN
from .collect import Busy, Collector
from .config import RuntimeConfig
from .errors import MorphcacheError, TierError
from .landing import Copy, Landing
from .metrics import Metrics
from .pages import PageDirectory, PageRecord
from .pipeline import Pipeline
from .roombatch import make_room_batch
from .seam import PolicySeam
from .tiering import TierMover
from .tiers import Storage

INLINE_COPIES = 1024  # a waiting recovery's copies up to this many: its own (workers copy nothing in parallel:
# the copies hold the interpreter lock, or the manager's lock with the engine's tensor store; a hand-off to a
# worker only adds switches of the interpreter lock, milliseconds each)
_HERE: Future[None] = Future()  # the future of a copy carried out before the lock is let go (never waited for)
_HERE.set_result(None)


@dataclass
class _Batch:
    """Copies started together: their one future, the jobs not ended yet, the first copy that failed."""

    future: Future[None]
    left: int
    error: BaseException | None = None


class Prefetcher:
    """Starts copies back to the GPU and lands them."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, storage: Storage, seam: PolicySeam, busy: Busy,
                 collector: Collector, tiers: TierMover, metrics: Metrics, config: RuntimeConfig,
                 lock: threading.RLock) -> None:
        self.pipe, self.pages, self.storage, self.seam, self.busy = pipe, pages, storage, seam, busy
        self.collector, self.tiers, self.metrics, self.lock = collector, tiers, metrics, lock
        self.page_bytes = config.page_bytes or storage.data.page_bytes
        self.workers = config.prefetch_workers
        self.inline_copies = INLINE_COPIES
        self.landing = Landing(pipe, pages, storage, seam, busy, collector, metrics, self.page_bytes)
        self.executor = ThreadPoolExecutor(self.workers, thread_name_prefix="morphcache-prefetch")
        self._queued: list[Copy] = []  # copies ``start_queued`` starts
        self._queued_future: Future[None] | None = None  # the one future they share

    def prefetch(self, pid: int, protect: frozenset[int] | set[int] = frozenset(), *,
                 held: bool = False, start: bool = True) -> Future[None]:
        """Start copying a host or disk page back into a reserved GPU slot (any failure gives the slot
        back and leaves the page where it was).  ``held``: the caller holds ``protect`` already.
        ``start=False``: the copy is queued (the page in flight all the same) until ``start_queued``,
        which the caller must reach; the copies queued together share one future, done when all of them
        are (its exception the first failed copy's)."""
        existing = self.busy.inflight.get(pid)
        if existing is not None:
            return existing
        if held and pid in protect:  # the caller holds the page itself: nothing to hold, a move's sweep only
            self.tiers.sweep()
            return self._prefetch(pid, protect, start)
        with self.tiers.holding(pid, frozenset() if held else protect):
            return self._prefetch(pid, protect, start)

    def reserve(self, pids: Sequence[int], protect: frozenset[int] | set[int]) -> None:
        """Before ``prefetch`` of each of ``pids`` in turn (the caller holds them and ``protect``): the
        GPU room their copies will take, made in one go when that is exactly the room they would make
        one slot at a time (``roombatch.make_room_batch``); otherwise nothing (each makes its own).  The
        pages counted are those whose ``prefetch`` will take a slot: known, not in flight, on the host
        or disk, the spec allowing it; the victims' moves change none of that (page-local events on
        unprotected GPU and host pages), nor does a ``prefetch`` fired on another page."""
        slots = self.storage.slots
        free = len(slots.free_slots)
        if len(pids) <= free:  # room for them all already
            return
        allowed, records, inflight = self.pipe.allower("prefetch"), self.pages.records, self.busy.inflight
        need = 0
        for pid in pids:
            rec = records.get(pid)
            if rec is not None and pid not in inflight and rec.tier in ("host", "disk") and allowed(None, pid):
                need += 1
        if need > free and make_room_batch(self.tiers, need - free, protect):
            slots.behind(len(slots.free_slots) - free)  # each copy takes the slot its own room would free

    def prefetch_many(self, pids: Sequence[int], protect: frozenset[int],
                      own: list[Copy] | None = None) -> tuple[list[Future[None]], list[tuple[int, str]]]:
        """``prefetch(pid, protect, held=True, start=False)`` for each of ``pids`` in order (the caller
        holds ``protect``, every one of them in it, and reaches ``start_queued``): their futures, and each
        page that is gone or refused with the reason.  A host or disk page with a slot free (``reserve``
        made the room) takes it and lets the firing decide (``_start``, as ``_prefetch`` does).  ``own``:
        the copies go there instead (their future one done already), landed before the lock is let go."""
        records, inflight, futures, failed = self.pages.records, self.busy.inflight, [], []
        storage, sweep, fire = self.storage, self.tiers.sweep, self.pipe.firer("prefetch")
        disk, slots = storage.disk, storage.slots
        for pid in pids:
            rec = records.get(pid)
            if rec is None:
                failed.append((pid, "page is gone"))
                continue
            fut = inflight.get(pid)
            if fut is not None:
                futures.append(fut)
                continue
            if disk is not None and disk.leftovers:  # a move's sweep
                sweep()
            source = rec.tier
            try:
                if (source != "host" and source != "disk") or not slots.free_slots:
                    futures.append(self._prefetch(pid, protect, False, own))  # its room made, or its refusal
                else:
                    futures.append(self._start(rec, slots.take(pid), source, False, fire, own))
            except MorphcacheError as exc:
                failed.append((pid, str(exc)))
        return futures, failed

    def prefetch_here(self, pids: Sequence[int],
                      protect: frozenset[int]) -> tuple[list[Future[None]], list[tuple[int, str]]]:
        """(lock held) ``reserve`` and ``prefetch_many`` of ``pids``, their copies then fetched and landed
        here, under the lock (no hand-off, no future to complete: nothing else sees them in flight): the
        futures (another call's copies among them, maybe not done) and the refusals."""
        own: list[Copy] = []
        try:
            self.reserve(pids, protect)
            return self.prefetch_many(pids, protect, own)
        finally:
            if own:  # as a worker's job (``_run_all``), its error left on no future (none waits for it)
                self.landing.land_all(own, self.landing.fetch_all(own))

    def _prefetch(self, pid: int, protect: frozenset[int] | set[int], start: bool = True,
                  own: list[Copy] | None = None) -> Future[None]:
        rec = self.pages.get(pid)
        pipe = self.pipe
        source = rec.tier
        slots = self.storage.slots
        if source in ("host", "disk") and slots.free_slots:  # no room to make first (``reserve`` made it):
            slot = slots.take(pid)                            # the firing decides, a refusal gives it back
        else:
            if source not in ("host", "disk") or not pipe.allowed("prefetch", None, pid):
                pipe.fire("prefetch", None, pid)  # raises the spec's refusal
                raise TierError(f"page {pid} has no host or disk copy to prefetch")
            slot = self.tiers.take_slot(rec, protect)
        return self._start(rec, slot, source, start, pipe.firer("prefetch"), own)

    def _start(self, rec: PageRecord, slot: int, source: str, start: bool,
               fire: Callable[[Any, Any, Any, Any], None], own: list[Copy] | None = None) -> Future[None]:
        """Fire ``prefetch`` on the page, which holds reserved ``slot`` (a refusal gives the slot back),
        place it there and start its copy (``start``), queue it for ``start_queued``, or append it to
        ``own`` (its future one done already); the page is in flight then."""
        pid = rec.pid
        try:
            fire(None, pid, None, None)
        except BaseException:
            self.storage.slots.give(slot)
            raise
        try:
            self.storage.place(rec, slot, self.pipe.store.cols[GEN][pid])  # (a column of ints)
            if own is not None:
                fut: Future[None] = _HERE
                own.append((pid, slot, source))
            elif start:
                fut = self.executor.submit(self._copy, pid, slot, source)
            else:
                fut = self._queued_future or self._queue_future()
                self._queued.append((pid, slot, source))
        except BaseException:  # the event fired; nothing may strand the page without its copy
            self._abandon(pid, slot)
            raise
        self.busy.inflight[pid] = fut
        return fut

    def _queue_future(self) -> Future[None]:
        """The future of the copies queued from now on, running already (it cannot be cancelled: a copy
        queued is carried out)."""
        fut: Future[None] = Future()
        fut.set_running_or_notify_cancel()
        self._queued_future = fut
        return fut

    def start_queued(self, waited: bool = False) -> None:
        """Start the copies ``prefetch(..., start=False)`` queued (call without the lock): one job a
        worker, each taking every ``workers``-th copy in queue order (a recovery's copies cost one hand-off
        to the pool a worker, not one a page).  Copies that cannot start (the workers stopped) are
        abandoned, as a copy that cannot start at once is, their future failed, and the error raised.

        ``waited``: the caller waits for them all, so it takes a job itself, in queue order, each copy
        exactly as a worker's: the whole queue when it holds at most ``inline_copies`` (a hand-off to a
        worker and back costs more than such a job), else one share for every ``inline_copies`` copies,
        at most one a worker and its own."""
        with self.lock:
            queued, self._queued = self._queued, []
            future, self._queued_future = self._queued_future, None
        if not queued or future is None:
            return
        own: list[Copy] = []
        if waited and self.inline_copies > 0:  # (0: every copy to the workers)
            shares = min(self.workers + 1, -(-len(queued) // self.inline_copies))
            own, *jobs = [queued[w::shares] for w in range(shares)]
        else:
            jobs = [queued[w::self.workers] for w in range(min(self.workers, len(queued)))]
        batch = _Batch(future, len(jobs) + (1 if own else 0))
        try:
            self._submit(jobs, batch)
        finally:
            if own:
                self._run_all(own, batch)

    def _submit(self, jobs: list[list[Copy]], batch: _Batch) -> None:
        """Hand each job to the worker pool; when one cannot start, it and the jobs after it are
        abandoned and the error raised."""
        for j, job in enumerate(jobs):
            try:
                self.executor.submit(self._run_all, job, batch)
            except BaseException as exc:
                with self.lock:
                    for lpid, lslot, _ in (item for rest in jobs[j:] for item in rest):
                        self._abandon(lpid, lslot)
                        self.busy.inflight.pop(lpid, None)
                self._ended(batch, len(jobs) - j, exc)
                raise

    def _run_all(self, job: list[Copy], batch: _Batch) -> None:
        """Worker (or the waiting caller): one job's copies fetched in order, then landed in order under one
        hold of the lock (``Landing.land_all``); the batch's future told when the last job has ended."""
        error: BaseException | None = None
        try:
            lengths = self.landing.fetch_all(job)
            with self.lock:
                error = self.landing.land_all(job, lengths)
        except BaseException as exc:  # noqa: BLE001 - the copies' outcome, on the batch's future
            error = error or exc
        finally:
            self._ended(batch, 1, error)

    def _ended(self, batch: _Batch, jobs: int, error: BaseException | None) -> None:
        """``jobs`` of the batch ended (``error``: the first copy of theirs that failed); the last one
        completes the batch's future."""
        with self.lock:
            batch.error = batch.error or error
            batch.left -= jobs
            last = batch.left == 0
        if last:
            if batch.error is not None:
                batch.future.set_exception(batch.error)
            else:
                batch.future.set_result(None)

    def _abandon(self, pid: int, slot: int) -> None:
        """A prefetch whose copy could not be started: the page goes to the recompute path (spec
        ``copy_done`` then ``verify`` measuring nothing, ``corrupt``) and its slot is given back."""
        rec = self.pages.get(pid)
        pipe = self.pipe
        pipe.fire("copy_done", None, pid)
        pipe.fire("verify", None, pid, observed={"intact": False})
        pipe.fire("corrupt", None, pid)
        if rec.gpu_slot == slot:
            self.storage.free_slot(rec)
        else:
            self.storage.slots.give(slot)
        self.seam.moved(rec, "dropped")

    def _copy(self, pid: int, slot: int, source: str) -> None:
        """Worker: copy the payload into the reserved slot, then let the spec decide if it lands."""
        length = self.landing.fetch(pid, slot, source)
        with self.lock:
            error = self.landing.land_all([(pid, slot, source)], [length])
        if error is not None:
            raise error

    def wait(self, timeout: float | None = None) -> None:
        """Block until every copy in flight has landed or failed (call without the lock)."""
        with self.lock:
            futures = list(self.busy.inflight.values())
        wait(futures, timeout)

    def close(self) -> None:
        """Stop the copy workers after the copies in flight."""
        self.executor.shutdown(wait=True)
