"""Carrying out a recovery plan: prefetch (asynchronous copies, waited for), recompute, compress.

::

    plan.pages_on("prefetch")   prefetcher.prefetch, all started once the lock is let go, then waited for
                                (block=True: up to ``inline_copies`` copied and landed on this thread
                                before it lets the lock go: no hand-off, no future, ``prefetch_here``)
    plan.pages_on("recompute")  drop (if not dropped yet) + recompute: a fresh slot, tokens prefilled
    every page of the plan      morphology proposals (compress, index, admit) once it is on the GPU (two or
                                more pages together: ``Morphology.maintain_many``)

(the pages on each path and the count of assignments by path read off ``plan.routes``: made once, when
the lookup counted the plan's paths)

The plan's pages are held (``Busy``) for the whole call, so nothing forgets them between the
steps, even while the lock is released to wait for the copies.  Refusals are reported, not raised.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, wait

from .binding import TIER
from .collect import Busy, Collector
from .errors import MorphcacheError
from .metrics import Metrics
from .morphology import Morphology
from .pages import PageDirectory
from .pipeline import Pipeline
from .plan import RecoveryPlan, RecoveryReport
from .prefetch import Prefetcher
from .tiering import TierMover

TOGETHER_FROM = 2


class Recovery:
    """Executes recovery plans."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, tiers: TierMover, prefetcher: Prefetcher,
                 morph: Morphology, busy: Busy, collector: Collector, metrics: Metrics, lock: threading.RLock) -> None:
        self.pipe, self.pages, self.tiers, self.prefetcher, self.morph = pipe, pages, tiers, prefetcher, morph
        self.busy, self.collector, self.metrics, self.lock = busy, collector, metrics, lock
        codes = pipe.cspec.codes[TIER]
        self._gpu, self._dropped = codes["gpu"], codes["dropped"]
        # this many of the plan's pages on the GPU propose their morphology together (each page's
        # compression and indexing one generated function, the admissions one batch: about a fifth less
        # than page by page from two pages on; a single page's ``maintain`` costs less)
        self.together_from = TOGETHER_FROM

    def recover(self, plan: RecoveryPlan, block: bool) -> RecoveryReport:
        """Carry out ``plan`` (call without holding the lock: it waits for copies)."""
        protect = frozenset(plan.pages)
        with self.lock:
            self.busy.hold(protect)
        try:
            return self._recover(plan, block, protect)
        finally:
            with self.lock:
                ready = self.busy.unhold(protect)
                collect = self.collector.collect
                for pid in dict.fromkeys([*ready, *plan.pages]):  # (a page collected again finds it as left)
                    collect(pid)

    def _recover(self, plan: RecoveryPlan, block: bool, protect: frozenset[int]) -> RecoveryReport:
        failed: list[tuple[int, str]] = []
        futures: list[Future[None]] = []
        prefetch, recompute, done = plan.routes
        prefetcher = self.prefetcher
        if block and len(prefetch) <= prefetcher.inline_copies:  # copied here, before the lock is let go
            with self.lock:
                futures, failed = prefetcher.prefetch_here(prefetch, protect)
        else:
            try:
                with self.lock:
                    prefetcher.reserve(prefetch, protect)
                    futures, failed = prefetcher.prefetch_many(prefetch, protect)
            finally:
                prefetcher.start_queued(block)  # the copies start once the lock is free for them
        if block:  # a waited recovery's copies are done (its queued copies share one future; another
            pending = [fut for fut in set(futures) if not fut.done()]  # call's copies may be in flight)
            if pending:
                wait(pending)
        with self.lock:
            store = self.pipe.store
            for pid in recompute:
                if pid not in self.pages:
                    failed.append((pid, "page is gone"))
                    continue
                try:
                    if store.page(TIER, pid) != self._dropped:
                        self.pipe.fire("drop", None, pid)
                        self.tiers.dropped(pid)
                    self.tiers.recompute(pid, protect, held=True)
                except MorphcacheError as exc:
                    failed.append((pid, str(exc)))
            tier, records, gpu = store.cols[TIER], self.pages.records, self._gpu
            maintained = [pid for pid in plan.pages if pid in records and tier[pid] == gpu]
            if len(maintained) >= self.together_from:  # (held: none changes tier or is forgotten meanwhile)
                self.morph.maintain_many(maintained)
            else:
                for pid in maintained:
                    self.morph.maintain(pid)
            by_path = self.metrics.recoveries_by_path
            for path, n in done.items():
                by_path[path] += n
        return RecoveryReport(dict(done), tuple(failed), len(futures))
