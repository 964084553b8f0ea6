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
from .binding import COMPRESSED, DEPTH, FRONTIER, POOL, WINDOW
from .collect import Collector
from .config import RuntimeConfig
from .errors import GuardRefused
from .pages import PageDirectory
from .pipeline import Pipeline
from .readers import ReaderRecord
from .seam import PolicySeam
from .tiers import Storage


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
        self.pooled: dict[int, None] = {}  # pages in the reuse pool, in admission order
        pipe.watch(POOL, self._pool_changed)

    def _pool_changed(self, index: Any) -> None:
        pids: list[int] = index.tolist() if hasattr(index, "tolist") else [index]
        for pid in pids:
            pooled = self.store.page(POOL, pid) == self._pooled
            if pooled != (pid in self.pooled):
                if pooled:
                    self.pooled[pid] = None
                else:
                    self.pooled.pop(pid, None)
                rec = self.pages.find(pid)
                if rec is not None:
                    rec.meta.pooled = pooled
                    self.seam.updated(rec)

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
        if pipe.allowed("begin_compress", None, pid):
            pipe.fire("begin_compress", None, pid)
            self.storage.data.compress(rec.gpu_slot)
        if pipe.allowed("finish_compress", None, pid):
            pipe.fire("finish_compress", None, pid)
        if pipe.allowed("build_index", None, pid) and self._stale_index(pid):
            pipe.fire("build_index", None, pid)
        if self.config.auto_admit and self.store.page(POOL, pid) != self._pooled:
            self.admit(pid)
        if self.config.release_tails and pipe.allowed("release_tail", None, pid):
            pipe.fire("release_tail", None, pid)

    def maintain_many(self, pids: list[int]) -> None:
        """``maintain`` for many sealed pages (a decode step's), each proposal an event over them: the
        pages the spec allows it for fire as one batch."""
        data, records = self.storage.data, self.pages.records
        begun = self._propose("begin_compress", pids)
        for pid in begun:
            data.compress(records[pid].gpu_slot)
        self._propose("finish_compress", pids)
        self._propose("build_index", [pid for pid in pids if self._stale_index(pid)])
        if self.config.auto_admit:
            for pid in pids:
                if self.store.page(POOL, pid) != self._pooled:
                    self.admit(pid)
        if self.config.release_tails:
            self._propose("release_tail", pids)

    def _propose(self, event: str, pids: list[int]) -> list[int]:
        """Fire ``event`` on those of ``pids`` the spec allows it for (one batch, or each alone when the
        batch is too short for the vector backend); returns them."""
        pipe = self.pipe
        ok = [pid for pid in pids if pipe.allowed(event, None, pid)]
        if len(ok) >= pipeline.VECTOR_FROM:
            pipe.fire_batch(event, None, np.fromiter(ok, dtype=np.int64, count=len(ok)), distinct=True)
        else:
            for pid in ok:
                pipe.fire(event, None, pid)
        return ok

    def _stale_index(self, pid: int) -> bool:
        store = self.store
        return store.page("indexer", pid) != self.pipe.cspec.codes["indexer"]["built"] or \
            store.page("igen", pid) != store.page("cgen", pid)

    def admit(self, pid: int) -> bool:
        """Propose the page for the reuse pool; when the pool is full, evict the policy's victim and
        admit in one transaction (the victim stays if admission is still refused).  True if admitted."""
        pipe = self.pipe
        if pipe.allowed("admit", None, pid):
            pipe.fire("admit", None, pid)
            return True
        if len(self.pooled) < self.config.capacity or pid in self.pooled:
            return False
        victim = self.seam.choose("pool", ("evict",), {pid})
        if victim is None:
            return False
        sp = pipe.begin()
        try:
            pipe.fire("evict", None, victim)
            pipe.fire("admit", None, pid)
        except GuardRefused:
            pipe.rollback(sp)
            return False
        pipe.commit()
        self.collector.collect(victim, keep=frozenset({pid}))
        return True

    def auto_slide(self, reader: ReaderRecord) -> int:
        """Propose ``slide`` for the reader's oldest live windows until the spec refuses one."""
        block = reader.block
        slid = 0
        store, pipe = self.store, self.pipe
        if len(block) - reader.slide_next > 64:  # far behind (an attached prefix): skip to the first live window
            rest = np.fromiter(block[reader.slide_next:-1], dtype=np.int64, count=len(block) - 1 - reader.slide_next)
            live = np.flatnonzero(store.vecs[WINDOW][rest] == self._live)
            reader.slide_next += int(live[0]) if len(live) else len(rest)
        if len(block) - 1 - reader.slide_next >= pipeline.VECTOR_FROM:  # many windows behind: a batch first
            slid += self._slide_batch(reader)
        while reader.slide_next < len(block) - 1:
            pid = block[reader.slide_next]
            if store.page(WINDOW, pid) == self._live:
                if not pipe.allowed("slide", None, pid):
                    break
                pipe.fire("slide", None, pid)
                slid += 1
            reader.slide_next += 1
        return slid

    def _slide_batch(self, reader: ReaderRecord) -> int:
        """The live windows of the reader's block from ``slide_next`` that its own frontier has left W
        tokens behind, up to the first it has not: ``slide`` as one batch over them, all or none (a
        refusal, another holder or a pin, leaves them to ``auto_slide``'s one-by-one walk, which the
        batch only shortens: it stops where the walk would look next).  How many slid."""
        block, store, c = reader.block, self.store, self.config.page_size
        first = reader.slide_next
        rest = np.fromiter(block[first:-1], dtype=np.int64, count=len(block) - 1 - first)
        behind = (store.vecs[DEPTH][rest] + 1) * c + self.config.window <= store.reader(FRONTIER, reader.rid)
        end = len(rest) if behind.all() else int(np.argmin(behind))
        live = store.vecs[WINDOW][rest[:end]] == self._live
        pids = rest[:end][live]
        if len(pids):
            try:
                self.pipe.fire_batch("slide", None, pids, distinct=True)
            except GuardRefused:
                return 0
        reader.slide_next = first + end
        return len(pids)

    def slide(self, reader: ReaderRecord) -> int:
        """Propose ``slide`` for every live window of the reader but its last page; how many slid."""
        slid = 0
        for pid in reader.block[:-1]:
            if self.store.page(WINDOW, pid) == self._live and self.pipe.allowed("slide", None, pid):
                self.pipe.fire("slide", None, pid)
                slid += 1
        return slid
