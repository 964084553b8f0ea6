"""The machinery every scored policy shares: per-tier heaps of page keys, kept incrementally.

A scored policy gives each page a *key* (lower leaves first) whenever the runtime notifies it of
the page; the key is pushed onto the heap of the page's tier (and of the reuse pool if the page is
pooled).  Nothing is rescanned per decision::

    notification  ->  key(meta)  ->  push (key, -depth, seq, page, version) onto heap[tier, part, queue]
    propose(d)    ->  pop the smallest current entry of d's heaps (stale versions are skipped),
                      yield its page; entries the runtime did not take are pushed back afterwards

    heaps of "gpu":   cold (no live sequence holds the page) before hot, each split by queue; a
                      page taken by a sequence stays in its cold heap until it surfaces at the top
                      while still held (then it moves to the hot heap), so holding and releasing
                      a page costs nothing in the common case
    heaps of "host", "disk", "pool": one per queue

A page re-keyed while it sits in a heap leaves a stale entry behind (its version moved on); a heap
holding more than twice its live pages plus 64 is rebuilt, so the stale entries cost O(1) amortised.
Each tier has an *entry clock* that ticks whenever a page enters it; ``anchor`` is that clock at the
page's last access (or its entry, if later), so ``anchor + turnover`` is a page's key once a full
tier's worth of pages has come in after it.  Pages of equal key leave deepest first: the pages of
one request share an anchor, and a prefix cache loses least by cutting a chain at its tail (a
page is reachable only through its ancestors).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

from morphcache.runtime.policy import DECISIONS, EvictionPolicy, PageMeta

Entry = tuple[float, int, int, int, int]  # (key, -depth, push sequence, page id, version)
HeapName = tuple[str, str, str]  # (decision, "cold" | "hot" | "", queue)
TIERS = ("gpu", "host", "disk")


class PageRecord:
    """What a scored policy remembers of one page."""

    __slots__ = ("page", "meta", "heap", "version", "pool_heap", "pool_version", "pooled", "tier", "anchor",
                 "pool_anchor", "queue", "last", "extra", "key")

    def __init__(self, meta: PageMeta) -> None:
        self.page = meta.page
        self.meta = meta  # the runtime's metadata of the page (read only)
        self.heap: HeapName | None = None
        self.version = 0
        self.pool_heap: HeapName | None = None
        self.pool_version = 0
        self.pooled = False
        self.tier = ""
        self.anchor = 0.0
        self.pool_anchor = 0.0
        self.queue = ""
        self.last = 0.0  # policy clock at the last access (or insertion)
        self.extra: object = None  # the token types the keys were computed with
        self.key = 0.0  # the key in the tier's heap


class ScoredPolicy(EvictionPolicy):
    """Base of the policies that order pages by a key; subclasses define ``key`` (and may route
    pages to queues with ``queue_of``)."""

    name = "scored"

    def __init__(self) -> None:
        self.records: dict[int, PageRecord] = {}
        self.heaps: dict[HeapName, list[Entry]] = {}
        self.live: dict[HeapName, int] = {}
        self.parts: dict[tuple[str, str], set[HeapName]] = {}
        self.count = dict.fromkeys(DECISIONS, 0)
        self.entered = dict.fromkeys(DECISIONS, 0)
        self.now = 0.0
        self.last_entry = dict.fromkeys(DECISIONS, 0.0)
        self.entry_gap = dict.fromkeys(DECISIONS, 1.0)  # ticks between entries into the tier (EWMA)
        self.seq = itertools.count()
        self.open: list[list[tuple[HeapName, Entry]]] = []
        self.proposed = 0

    # -- what subclasses define ---------------------------------------------------------------------
    def key(self, meta: PageMeta, rec: PageRecord, decision: str) -> float:
        """The page's key for ``decision`` (lower leaves first)."""
        raise NotImplementedError

    def queue_of(self, meta: PageMeta, rec: PageRecord) -> str:
        """The queue the page is routed to (one queue unless overridden)."""
        return ""

    def turnover(self, decision: str) -> int:
        """Pages in the tier (or pool) of ``decision``: one full turnover of its entry clock."""
        return max(1, self.count[decision])

    def turnover_ticks(self, decision: str) -> float:
        """Clock ticks one full turnover of the tier takes at the recent entry rate."""
        return self.turnover(decision) * self.entry_gap[decision]

    # -- notifications ------------------------------------------------------------------------------
    def on_insert(self, meta: PageMeta) -> None:
        rec = self.records.get(meta.page)
        if rec is None:
            rec = self.records[meta.page] = PageRecord(meta)
        self._tick(max(meta.created, meta.last_use))
        rec.last = self.now
        self._place(meta, rec, touched=True)

    def on_access(self, meta: PageMeta, now: int) -> None:
        rec = self.records.get(meta.page)
        if rec is None:
            return
        self._tick(now)
        rec.last = self.now
        self._place(meta, rec, touched=True)

    def on_update(self, meta: PageMeta) -> None:
        rec = self.records.get(meta.page)
        if rec is not None:
            self._place(meta, rec, touched=False)

    def on_move(self, meta: PageMeta, old_tier: str) -> None:
        rec = self.records.get(meta.page)
        if rec is not None:
            self._place(meta, rec, touched=False)

    def on_remove(self, meta: PageMeta) -> None:
        rec = self.records.pop(meta.page, None)
        if rec is None:
            return
        self._leave(rec)
        rec.version += 1
        if rec.pooled:
            self.count["pool"] -= 1
            if rec.pool_heap is not None:
                self.live[rec.pool_heap] -= 1

    # -- proposals ----------------------------------------------------------------------------------
    def propose(self, decision: str) -> Iterator[int]:
        self._restore_open()
        parts = ("cold", "hot") if decision == "gpu" else ("",)
        taken: list[tuple[HeapName, Entry]] = []
        self.open.append(taken)
        seen: set[int] = set()
        try:
            for part in parts:
                while True:
                    best: Entry | None = None
                    best_name: HeapName | None = None
                    for name in tuple(self.parts.get((decision, part), ())):
                        heap = self.heaps[name]
                        while heap and not self._current(name, heap[0]):
                            heapq.heappop(heap)
                        if heap and (best is None or heap[0] < best):
                            best, best_name = heap[0], name
                    if best is None or best_name is None:
                        break
                    heapq.heappop(self.heaps[best_name])
                    rec = self.records[best[3]]
                    if part == "cold" and rec.meta.holders:
                        self._to_hot(rec, best)
                        continue
                    taken.append((best_name, best))
                    if best[3] in seen:
                        continue
                    seen.add(best[3])
                    self.proposed += 1
                    yield best[3]
        finally:
            self.open = [t for t in self.open if t is not taken]
            self._push_back(taken)

    def stats(self) -> dict[str, float]:
        out: dict[str, float] = {f"pages_{d}": float(self.count[d]) for d in DECISIONS}
        out["proposed"] = float(self.proposed)
        return out

    # -- internals ----------------------------------------------------------------------------------
    def _tick(self, now: float) -> None:
        if now > self.now:
            self.now = float(now)

    def _entry(self, decision: str) -> None:
        """A page entered the tier (or pool) of ``decision``: tick its entry clock, time the gap."""
        self.entered[decision] += 1
        gap = self.now - self.last_entry[decision]
        self.last_entry[decision] = self.now
        self.entry_gap[decision] += 0.01 * (gap - self.entry_gap[decision])

    def _current(self, name: HeapName, entry: Entry) -> bool:
        rec = self.records.get(entry[3])
        if rec is None:
            return False
        if name[0] == "pool":
            return rec.pool_heap == name and rec.pool_version == entry[4]
        return rec.heap == name and rec.version == entry[4]

    def _push_back(self, taken: list[tuple[HeapName, Entry]]) -> None:
        for name, entry in taken:
            if self._current(name, entry):
                heapq.heappush(self.heaps[name], entry)
        taken.clear()

    def _restore_open(self) -> None:
        for taken in self.open:
            self._push_back(taken)

    def _heap(self, name: HeapName) -> list[Entry]:
        heap = self.heaps.get(name)
        if heap is None:
            heap = self.heaps[name] = []
            self.live[name] = 0
            self.parts.setdefault((name[0], name[1]), set()).add(name)
        return heap

    def _push(self, name: HeapName, key: float, meta: PageMeta, version: int) -> None:
        heap = self._heap(name)
        heapq.heappush(heap, (key, -meta.depth, next(self.seq), meta.page, version))
        if len(heap) > 2 * self.live[name] + 64:
            self._compact(name)

    def _compact(self, name: HeapName) -> None:
        heap = [e for e in self.heaps[name] if self._current(name, e)]
        heapq.heapify(heap)
        self.heaps[name] = heap

    def _to_hot(self, rec: PageRecord, entry: Entry) -> None:
        """A held page surfaced in a cold GPU heap: it moves to the hot heap under the same key."""
        assert rec.heap is not None
        name: HeapName = ("gpu", "hot", rec.heap[2])
        self._heap(name)
        self.live[rec.heap] -= 1
        self.live[name] += 1
        rec.heap = name
        rec.version += 1
        heapq.heappush(self.heaps[name], (entry[0], entry[1], entry[2], entry[3], rec.version))

    def _leave(self, rec: PageRecord) -> None:
        """Take the page out of its tier's heap (its entries become stale)."""
        if rec.heap is not None:
            self.live[rec.heap] -= 1
            self.count[rec.heap[0]] -= 1
            rec.heap = None

    def _place(self, meta: PageMeta, rec: PageRecord, touched: bool, rekey: bool = False) -> None:
        """Put the page in its tier's heap (and the pool's, if pooled) under its current key.

        Keys are recomputed when the page was touched, entered a tier, changed types or ``rekey``
        asks for it; a page that only changed heap (held / not held) keeps its key.
        """
        rec.meta = meta
        tier = meta.tier if meta.tier in TIERS else ""
        fresh = touched or rekey or meta.types != rec.extra
        if tier and tier != rec.tier:
            self._entry(tier)
            rec.anchor = self.entered[tier]
            fresh = True
        elif tier and touched:
            rec.anchor = self.entered[tier]
        rec.tier = tier
        rec.extra = meta.types
        queue = self.queue_of(meta, rec)
        if queue != rec.queue:
            rec.queue = queue
            fresh = True
        name: HeapName | None = None
        if tier == "gpu":  # held pages stay in the cold heap until one surfaces there (propose moves it)
            held = meta.holders and rec.heap is not None and rec.heap[1] == "hot"
            name = ("gpu", "hot" if held else "cold", queue)
        elif tier:
            name = (tier, "", queue)
        if name != rec.heap or fresh:
            self._leave(rec)
            rec.version += 1
            if name is not None:
                self._heap(name)
                rec.heap = name
                self.live[name] += 1
                self.count[name[0]] += 1
                if fresh:
                    rec.key = self.key(meta, rec, tier)
                self._push(name, rec.key, meta, rec.version)
        if meta.pooled != rec.pooled:
            fresh = True
            if meta.pooled:
                self._entry("pool")
                self.count["pool"] += 1
                rec.pool_anchor = self.entered["pool"]
            else:
                self.count["pool"] -= 1
        elif meta.pooled and touched:
            rec.pool_anchor = self.entered["pool"]
        rec.pooled = meta.pooled
        if not fresh:
            return
        if rec.pool_heap is not None:
            self.live[rec.pool_heap] -= 1
            rec.pool_heap = None
        rec.pool_version += 1
        if meta.pooled:
            pname: HeapName = ("pool", "", queue)
            self._heap(pname)
            rec.pool_heap = pname
            self.live[pname] += 1
            self._push(pname, self.key(meta, rec, "pool"), meta, rec.pool_version)

    def rekey_all(self) -> None:
        """Recompute every key (after a subclass's parameters moved); O(pages), call it rarely."""
        for rec in list(self.records.values()):
            self._place(rec.meta, rec, touched=False, rekey=True)
