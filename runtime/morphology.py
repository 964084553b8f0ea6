"""The morphology of sealed pages, the reuse pool and the sliding window: proposals the spec decides.

::

    sealed page   begin_compress -> (data plane compresses) -> finish_compress -> build_index
                  -> admit (a full pool evicts the policy's victim first, in one transaction)
                  [-> release_tail]
    window        slide, oldest block first, while the spec lets the window go

Explicit calls (``compress``, ``recompress`` ...) raise the spec's refusal; proposals made on the
runtime's own initiative (``maintain``, ``admit``, ``auto_slide``) are dropped when refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import pipeline
from .binding import BLOCK, COMPRESSED, DEPTH, FRONTIER, PIN, POOL, WINDOW
from .collect import Collector
from .config import RuntimeConfig
from .errors import GuardRefused
from .pages import PageDirectory, PageRecord
from .pipeline import Pipeline
from .poolbatch import admit_batch, count_checks, count_refuser, exact_in_one_go
from .proposeplan import DataWork, Hook, Inline
from .readers import ReaderRecord
from .seam import PolicySeam
from .tiers import Storage

SLIDE_BATCH_FROM = 256  # live windows behind from which ``auto_slide`` tries a batch first (its guard's
# reduction over readers costs a batch about 1 ms at 100 pages, twice what proposing each page costs)
MAINTAIN = ("begin_compress", "finish_compress", "build_index")  # a sealed page's first proposals, in turn
PROPOSE_BATCHES = 16  # proposals of fewer pages than this many times the pipeline's ``VECTOR_FROM`` (256):
# each alone (~1 us a page; a batch decided firing by firing by the vector backend, the pool's count stepped
# by the outcomes, costs ~2.0 us a page at 64-127 pages and ~1.2 at 128-255 on the Mooncake replay)


class Morphology:
    """Compression, indexing, admission and window slides."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, storage: Storage, seam: PolicySeam,
                 collector: Collector, config: RuntimeConfig) -> None:
        self.pipe, self.pages, self.storage, self.seam, self.collector = pipe, pages, storage, seam, collector
        self.config = config
        self.store = pipe.store
        codes = pipe.cspec.codes
        self._none = codes[COMPRESSED]["none"]
        self._live = codes[WINDOW]["live"]
        self._pooled = codes[POOL]["pooled"]
        self._built = codes["indexer"]["built"]
        self.pooled: dict[int, None] = {}  # pages in the reuse pool, in admission order
        self.quiet = False  # pool changes noted by the caller (``poolbatch``), in the order it chooses
        self.batchable = exact_in_one_go(pipe.cspec)  # admissions in one go are exact (poolbatch.py)
        self.count_checks = count_checks(pipe.cspec)  # admit's conjuncts that read only the pool's counts
        self.count_refuses = count_refuser(pipe, self.count_checks)  # one of them false for a page
        self.block_holders = self.store.rev.get(BLOCK)  # who holds each page in a block table (None: not kept)
        # ``maintain_many``'s proposals: build_index only where the keys are stale, the data plane after begin
        stale = f"cols['indexer'][p] != {self._built} or cols['igen'][p] != cols['cgen'][p]"  # ``_stale_index``
        self._maintain_hooks: tuple[dict[int, Hook], dict[int, Hook]] = ({2: Inline(self._stale_index, stale)},
                                                                         {0: self._compress_data_hook()})
        pipe.watch(POOL, self._pool_changed)

    def _pool_changed(self, index: Any) -> None:
        if not self.quiet:
            self.note_pool(index.tolist() if isinstance(index, np.ndarray) else (index,))

    def note_pool(self, pids: list[int] | tuple[int, ...]) -> None:
        """Bring the pool's bookkeeping and the pages' metadata up to their ``pool`` state, in order (the
        policy told of each in that order)."""
        col, code, pooled, find = self.store.cols[POOL], self._pooled, self.pooled, self.pages.find
        changed = []
        for pid in pids:
            now = col[pid] == code
            if now != (pid in pooled):
                if now:
                    pooled[pid] = None
                else:
                    del pooled[pid]
                rec = find(pid)
                if rec is not None:
                    rec.pooled = now
                    changed.append(rec)
        if len(changed) == 1:
            self.seam.updated(changed[0])
        elif changed:
            self.seam.updated_many(changed)

    def note_moved(self, out: list[int], into: list[int]) -> None:
        """``note_pool`` after the caller evicted each of ``out`` and admitted each of ``into`` (pooled
        pages and pages out of the pool, with records): the policy told of ``out[0], into[0], out[1],
        into[1] ...`` in that order."""
        pooled, records = self.pooled, self.pages.records
        if len(out) != len(into):
            raise ValueError("as many pages admitted as evicted")
        for gone in out:  # (the pages admitted are new keys: the pool's order is the one at a time's)
            del pooled[gone]
        pooled.update(dict.fromkeys(into))
        changed: list[PageRecord] = [*map(records.__getitem__, out), *map(records.__getitem__, into)]
        k = len(out)
        for rec in changed[:k]:
            rec.pooled = False
        for rec in changed[k:]:
            rec.pooled = True
        changed[::2], changed[1::2] = changed[:k], changed[k:]  # told in the order out[0], into[0], out[1] ...
        self.seam.updated_many(changed)

    # -- explicit calls ---------------------------------------------------------------------------
    def compress(self, pid: int) -> None:
        """Build the compressed entry and indexer keys of a sealed page (all three events or none)."""
        rec = self.pages.get(pid)
        pipe = self.pipe
        with pipe.atomic():
            if self.store.page(COMPRESSED, pid) == self._none:
                pipe.fire("begin_compress", None, pid)
            pipe.fire("finish_compress", None, pid)
            pipe.fire("build_index", None, pid)
        self.storage.data.compress(rec.gpu_slot)

    def recompress(self, pid: int) -> None:
        """Rebuild a page's compressed entry from its raw tail (its indexer keys go stale)."""
        rec = self.pages.get(pid)
        pipe = self.pipe
        with pipe.atomic():
            pipe.fire("recompress", None, pid)
            pipe.fire("finish_compress", None, pid)
        self.storage.data.compress(rec.gpu_slot)

    # -- proposals --------------------------------------------------------------------------------
    def maintain(self, pid: int) -> None:
        """Propose compression, indexing, admission (and tail release) for a sealed page."""
        pipe = self.pipe
        rec = self.pages.get(pid)
        if pipe.propose("begin_compress", None, pid):
            self.storage.data.compress(rec.gpu_slot)
        pipe.propose("finish_compress", None, pid)
        if self._stale_index(pid):
            pipe.propose("build_index", None, pid)
        if self.config.auto_admit and self.store.page(POOL, pid) != self._pooled:
            self.admit(pid)
        if self.config.release_tails:
            pipe.propose("release_tail", None, pid)

    def maintain_many(self, pids: list[int]) -> None:
        """``maintain`` for many sealed pages (a decode step's), each proposal an event over them: the
        pages the spec allows it for fire as one batch; compression and indexing proposed page by page,
        each page's three proposals one generated function (``Pipeline.proposals``)."""
        chain = self.pipe.proposals(MAINTAIN, *self._maintain_hooks)
        each = getattr(chain, "each", None)  # the generated proposals' loop over many pages
        if each is not None:
            each(None, pids)
        else:
            for pid in pids:
                chain(None, pid)
        if self.config.auto_admit:
            pool = self.store.cols[POOL]
            todo = [pid for pid in pids if pool[pid] != self._pooled]
            if self.batchable and todo and len(self.pooled) >= self.config.capacity \
                    and not self.quiet and self.count_refuses(todo[0]):
                self.admit_many(todo, full=True)  # the pool's count refuses every proposal
            else:
                quiet, self.quiet = self.quiet, True  # the admissions noted after them, in order (nothing
                try:                                  # reads the pool's bookkeeping or tells the policy between)
                    missed = self._propose("admit", todo, missed=True)
                finally:
                    self.quiet = quiet
                    if not quiet:
                        self.note_pool(todo)
                self.admit_many(missed)
        if self.config.release_tails:
            self._propose("release_tail", pids)

    def _propose(self, event: str, pids: list[int], missed: bool = False) -> list[int]:
        """Fire ``event`` on each of ``pids`` in order where the spec allows it (when there are many, one
        batch of firings each decided on its own: the pipeline's vector backend when the planner finds
        them independent, else each alone, seeing the ones before); returns those that fired (``missed``:
        those that did not)."""
        pipe = self.pipe
        if len(pids) >= PROPOSE_BATCHES * pipeline.VECTOR_FROM:
            fired = pipe.fire_batch(event, None, np.fromiter(pids, dtype=np.int64, count=len(pids)), atomic=False,
                                    distinct=True)
            if fired.all():
                return [] if missed else pids
            return [pid for pid, ok in zip(pids, fired.tolist(), strict=True) if ok != missed]
        propose = pipe.proposer(event)
        return [pid for pid in pids if propose(None, pid) != missed]

    def _compress_data_hook(self) -> DataWork:
        """``compress_data(pid)``: the data plane compresses page ``pid`` (its ``begin_compress`` fired), run in
        line by the generated proposals (the data plane and the records are the same for the manager's life)."""
        return DataWork.inline("data_compress(page_records[p].gpu_slot)",
                               {"data_compress": self.storage.data.compress, "page_records": self.pages.records})

    def _stale_index(self, pid: int) -> bool:
        cols = self.store.cols
        return cols["indexer"][pid] != self._built or cols["igen"][pid] != cols["cgen"][pid]

    def admit(self, pid: int, refused: bool = False) -> bool:
        """Propose the page for the reuse pool; when the pool is full, evict the policy's victim and
        admit in one transaction (the victim stays if admission is still refused), both moves noted
        after it, in that order (``note_pool``).  True if admitted.  ``refused``: the caller knows the
        proposal is refused as the pool stands (``count_refuser``), so it is not made (a refused
        proposal changes and counts nothing)."""
        pipe = self.pipe
        if not refused and pipe.propose("admit", None, pid):
            return True
        if len(self.pooled) < self.config.capacity or pid in self.pooled:
            return False
        victim = self.seam.choose("pool", ("evict",), {pid})
        if victim is None:
            return False
        quiet, self.quiet = self.quiet, True  # both moves noted together after the transaction (nothing reads
        sp = pipe.begin()                     # the pool's bookkeeping or tells the policy in between)
        try:
            pipe.fire("evict", None, victim)
            pipe.fire("admit", None, pid)
        except GuardRefused:  # noted as each write and its undoing are: the eviction's now (none if it was
            self.quiet = quiet  # refused), its undoing's by the watcher
            if not quiet:
                self.note_pool((victim,))
            pipe.rollback(sp)
            return False
        finally:
            self.quiet = quiet
        pipe.commit()
        if not quiet:
            self.note_pool((victim, pid))
        self.collector.collect(victim, keep=frozenset({pid}))
        return True

    def admit_many(self, pids: list[int], full: bool = False) -> None:
        """``admit`` each of ``pids`` (sealed, distinct, refused as they stood: the pool may be full), in
        order: in one go where that is exactly the same (``poolbatch.admit_batch``; ``full``: the
        pool's count refuses them all, ``count_refuser``: an admission one at a time keeps the count, so
        it refuses each later proposal too, which is not made)."""
        for pid in pids[admit_batch(self, pids, full):]:
            self.admit(pid, full)

    def auto_slide(self, reader: ReaderRecord) -> int:
        """Propose ``slide`` for the reader's oldest live windows until the spec refuses one."""
        block = reader.block
        slid = 0
        store, pipe = self.store, self.pipe
        if len(block) - reader.slide_next > 64:  # far behind (an attached prefix): skip to the first live window
            rest = np.fromiter(block[reader.slide_next:-1], dtype=np.int64, count=len(block) - 1 - reader.slide_next)
            live = np.flatnonzero(store.vecs[WINDOW][rest] == self._live)
            reader.slide_next += int(live[0]) if len(live) else len(rest)
        if len(block) - 1 - reader.slide_next >= SLIDE_BATCH_FROM:  # many windows behind: a batch first
            slid += self._slide_batch(reader)
        window, live_code, propose = store.cols[WINDOW], self._live, pipe.proposer("slide")
        at, end = reader.slide_next, len(block) - 1  # (slides change no block table)
        try:
            while at < end:
                pid = block[at]
                if window[pid] == live_code:
                    if not propose(None, pid):
                        break
                    slid += 1
                at += 1
        finally:
            reader.slide_next = at
        return slid

    def _slide_batch(self, reader: ReaderRecord) -> int:
        """The live windows of the reader's block from ``slide_next`` up to the first one the walk would
        stop at as far as can be told without the guard (its own frontier not W tokens past it, another
        holder, a pin): ``slide`` as one batch over them, all or none.  A refusal leaves them to
        ``auto_slide``'s one-by-one walk, which the batch only shortens (it resumes where the walk would
        look next, and decides the window it stops at).  How many slid."""
        block, store = reader.block, self.store
        first = reader.slide_next
        rest = np.fromiter(block[first:-1], dtype=np.int64, count=len(block) - 1 - first)
        live = store.vecs[WINDOW][rest] == self._live
        stop = live & ~self.may_slide(reader, rest)
        end = int(np.argmax(stop)) if stop.any() else len(rest)
        pids = rest[:end][live[:end]]
        if len(pids):
            try:
                self.pipe.fire_batch("slide", None, pids, distinct=True)
            except GuardRefused:
                return 0
        reader.slide_next = first + end
        return len(pids)

    def may_slide(self, reader: ReaderRecord, pids: np.ndarray) -> np.ndarray:
        """Whether each of the reader's pages ``pids`` looks slidable (a guess the guard then decides):
        the reader's frontier W tokens past it, no other holder, no pin."""
        store = self.store
        frontier = store.reader(FRONTIER, reader.rid)
        fits = (store.vecs[DEPTH][pids] + 1) * self.config.page_size + self.config.window <= frontier
        return fits & (self.pages.cols.holders[pids] <= 1) & (store.vecs[PIN][pids] == 0)

    def slide(self, reader: ReaderRecord) -> int:
        """Propose ``slide`` for every live window of the reader but its last page; how many slid."""
        return sum(1 for pid in reader.block[:-1]  # (in order, each proposed where its window is live)
                   if self.store.page(WINDOW, pid) == self._live and self.pipe.propose("slide", None, pid))
