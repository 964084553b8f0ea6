"""The default victim-choice policy: least recently used per tier, the GPU's unheld pages first.

Every other policy is written against it (``morphcache.policies`` falls back on it).  Its queues are
dicts kept in order; a notice stamps the page's touch in a column and moves the page at once, or,
behind a long batch, buffers it until a decision reads its queue (``LRUPolicy``'s docstring draws
it).  (Longer than most modules: the one class and the column helpers it alone uses, whose bulk,
scalar, immediate and buffered paths must give the same order, read best together.)
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import chain, islice
from operator import attrgetter

import numpy as np

from .metabatch import MetaBatch, page_array, page_ids
from .policy import EvictionPolicy, PageMeta


class LRUPolicy(EvictionPolicy):
    """Least recently used per tier; on the GPU, pages no live sequence holds go first.

    Placing a page (inserted, moved, or its holders or pool membership changed) appends it to its
    queue; an access moves it to the end of its queue and of the pool.  ``propose`` yields from
    dicts kept in queue order, no scan per decision beyond the proposals the runtime consumes.

    Touches are stamped: a notification writes the logical time of the touch into a per-page column.
    While nothing is buffered, a touch moves its page at once (a notice of up to ``eager`` pages in
    Python; a room's long batch of moves in bulk).  A longer notice (a prefix looked up, attached or
    freed: one vector write of stamps) buffers its pages instead, and so does every touch after it
    until a decision reads those queues (a long notice's pages kept as its array, not listed one by
    one); they then take the touched pages, in the order of their last stamp (many at once: out of the
    queues they sat in, a column says which, then into their new ones, each queue's by one bulk call).
    The pages not touched since keep their order ahead of the touched ones, exactly as if every touch
    had moved its page at once; a page touched many times between two decisions is moved once::

        page       7    12    40    41          code: its queue now (0: none), in a column
        stamp      3     9     5     8          touched since the last decision: 12, 40, 41
        decision   queue ... 7 | 40 41 12       (untouched first, then by stamp)
    """

    name = "lru"
    pure_proposals = True  # proposing only applies the buffered touches, as the next decision would
    few = 4096  # buffered touches up to this many are filed in Python (more: with numpy, a long backlog)
    # a batch of touches up to this many moves its pages at once when nothing is buffered (1024 made the
    # trace replay's notices ~4% cheaper, about 0.7% of the replay, but a decode step's 256 touches and a
    # 512-page lookup's accesses 10-30% dearer than stamped with numpy and filed by the next decision)
    eager = 64
    removes_scalar = 1024  # pages removed at once up to this many are cleared page by page (``on_remove_many``)
    moves_placed = 256  # moves told at once up to this many are placed page by page (``_place_many``)

    def __init__(self) -> None:
        self.order: dict[str, dict[int, None]] = {  # each queue a dict in order (re-inserting moves a page last)
            "gpu_cold": {}, "gpu_hot": {}, "host": {}, "disk": {}, "pool": {},
        }
        self.queues: list[dict[int, None]] = [{}]  # by code (QUEUES; 0: none, never filled)
        self.queues += [self.order[name] for name in QUEUES[1:]]  # type: ignore[index]
        self.pooled: set[int] = set()  # pages in the pool now
        # page -> code of its tier queue now (QUEUES; 0: none), and of the queue it sits in: each a numpy
        # view of a bytearray (bulk writes through the view, single reads and writes on the bytes)
        self.code_bytes, self.code = _codes(64)
        self.filed_bytes, self.filed = _codes(64)
        self.in_pool_bytes, self.in_pool = _flags(64)
        # page -> logical time of its last touch (tier queue; pool), each a numpy view of an array
        self.stamp_cells, self.stamp = _stamps(64)
        self.pool_stamp_cells, self.pool_stamp = _stamps(64)
        self.last = np.zeros(64, dtype=np.int64)  # scratch: a page's last position among the touches
        self.clock = 0
        self.touched: list[int] = []  # pages touched since the last decision, in touch order (flat; -1:
        self.pool_touched: list[int] = []  # the next of ``bulk``'s arrays, a long notice's pages, in its place)
        self.bulk: list[np.ndarray] = []
        self.pool_bulk: list[np.ndarray] = []
        self.held = [0, 0]  # entries in the two lists above (tier, pool), compacted when they outgrow the pages
        self.deciding = False  # whether a decision has read the tier queues yet
        # ``on_written`` (a fresh page filed once: its access supersedes its insert and hold), unless a
        # subclass overrides one of the notices it stands for
        self.merges_writes = all(getattr(type(self), name) is getattr(LRUPolicy, name) for name in
                                 ("on_insert", "on_holders_many", "on_access", "on_access_many", "on_written"))
        self.reads_updates = any(getattr(type(self), name) is not getattr(LRUPolicy, name) for name in
                                 ("on_update", "on_update_many"))

    @staticmethod
    def _queue(meta: PageMeta) -> str | None:
        tier = meta.tier
        if tier == "gpu":
            return "gpu_hot" if meta.holders else "gpu_cold"
        return tier if tier in ("host", "disk") else None

    def _ensure(self, page: int) -> None:
        size = len(self.code)
        if page >= size:
            new = max(2 * size, page + 1)
            for name, make, raw_name in (("code", _codes, "code_bytes"), ("filed", _codes, "filed_bytes"),
                                         ("in_pool", _flags, "in_pool_bytes"), ("stamp", _stamps, "stamp_cells"),
                                         ("pool_stamp", _stamps, "pool_stamp_cells")):
                raw, col = make(new)
                col[:size] = getattr(self, name)
                setattr(self, raw_name, raw)
                setattr(self, name, col)
            for name in ("last",):
                old = getattr(self, name)
                col = np.zeros(new, dtype=old.dtype)
                col[:size] = old
                setattr(self, name, col)

    def _touch_one(self, page: int, pool: bool) -> None:
        """Stamp a touch of ``page`` (in its tier queue, or ``pool``: in the pool, a pooled page) and
        move it there at once when nothing is buffered for those queues, else buffer it."""
        self.clock = clock = self.clock + 1
        if pool:
            self.pool_stamp_cells[page] = clock
            if not self.pool_touched:
                queue = self.order["pool"]
                queue.pop(page, None)
                queue[page] = None
                return
            self.pool_touched.append(page)
        else:
            self.stamp_cells[page] = clock
            if not self.touched:  # ``_file_each`` inlined (the hottest single touch)
                new, old = self.code_bytes[page], self.filed_bytes[page]
                if old:
                    del self.queues[old][page]
                if new:
                    self.queues[new][page] = None
                if old != new:
                    self.filed_bytes[page] = new
                return
            self.touched.append(page)
        held = self.held
        held[pool] += 1
        if held[0] + held[1] > 65536 and held[0] + held[1] > 65536 + 4 * (self._filed() + len(self.pooled)):
            self._compact()

    def _touch_many(self, pages: list[int] | np.ndarray, pool: bool, at_once: bool = False) -> None:
        """``_touch_one`` for each of ``pages`` (distinct), in order: a few moved at once in Python when
        nothing is buffered for those queues, else stamped in one vector write and buffered (``at_once``:
        tier touches moved at once, in bulk, however many, when nothing is buffered; so are a long
        batch's once a decision has read the tier queues: a workload that decides soon reads them
        again, one that never decides, never)."""
        n = len(pages)
        if not n:
            return
        if (at_once or self.deciding) and n > self.eager and not pool and not self.touched:
            idx = pages if isinstance(pages, np.ndarray) else np.array(pages, dtype=np.int64)
            self.stamp[idx] = np.arange(self.clock + 1, self.clock + n + 1)
            self.clock += n
            self._file_many(idx)
            return
        if n <= self.eager and not (self.pool_touched if pool else self.touched):
            clock = self.clock
            if pool:
                cells, queue = self.pool_stamp_cells, self.order["pool"]
                for page in (pages if isinstance(pages, list) else pages.tolist()):
                    clock += 1
                    cells[page] = clock
                    queue.pop(page, None)
                    queue[page] = None
            else:
                cells, listed = self.stamp_cells, (pages if isinstance(pages, list) else pages.tolist())
                for page in listed:
                    clock += 1
                    cells[page] = clock
                self._file_each(listed)
            self.clock = clock
            return
        (self.pool_stamp if pool else self.stamp)[pages] = np.arange(self.clock + 1, self.clock + n + 1)
        self.clock += n
        touched = self.pool_touched if pool else self.touched
        if isinstance(pages, list):
            touched.extend(pages)
        elif n > self.eager:  # a long notice's array kept whole (a copy), a marker in its place
            touched.append(BULK)
            (self.pool_bulk if pool else self.bulk).append(pages.copy())
        else:
            touched.extend(pages.tolist())
        held = self.held
        held[pool] += n
        if held[0] + held[1] > 65536 + 4 * (self._filed() + len(self.pooled)):
            self._compact()

    def _filed(self) -> int:
        """Pages in the tier queues."""
        return sum(map(len, self.queues))

    @property
    def placed(self) -> dict[int, str]:
        """Page -> the name of the tier queue it sits in (a copy; pages in none left out)."""
        return {page: QUEUES[code] for code, queue in enumerate(self.queues) for page in queue}  # type: ignore[misc]

    def _compact(self) -> None:
        """The touched pages kept once each (no decision for a long while)."""
        held = []
        for touched, bulk in ((self.touched, self.bulk), (self.pool_touched, self.pool_bulk)):
            pending = self._pending(touched, bulk)
            if isinstance(pending, list):
                touched.extend(pending)
            elif len(pending):
                touched.append(BULK)
                bulk.append(pending)
            held.append(len(pending))
        self.held = held

    def _pending(self, touched: list[int], bulk: list[np.ndarray]) -> list[int] | np.ndarray:
        """The pages of ``touched`` (each ``BULK`` marker standing for the next array of ``bulk``), each
        once, in the order of their last touch (and both emptied): a list when they are few, else an
        int64 array.  The entries were appended in touch order (stamps rise along them), so a page's
        last touch is its last occurrence: found with a scratch column (each page's last position
        written, then compared), no sort."""
        if not bulk and len(touched) <= self.few:  # few: in Python
            pages = list(dict.fromkeys(reversed(touched)))
            pages.reverse()
            touched.clear()
            return pages
        ids = np.array(touched, dtype=np.int64)
        touched.clear()
        if bulk:  # each marker replaced by its array, in place
            parts: list[np.ndarray] = []
            start = 0
            for marker, arr in zip(np.flatnonzero(ids == BULK).tolist(), bulk, strict=True):
                parts += (ids[start:marker], arr)
                start = marker + 1
            parts.append(ids[start:])
            ids = np.concatenate(parts)
            bulk.clear()
        at = np.arange(len(ids))
        last = self.last
        last[ids] = -1
        np.maximum.at(last, ids, at)  # a page touched again keeps its last position
        return ids[last[ids] == at]  # type: ignore[no-any-return]

    def _place(self, meta: PageMeta, code: int | None = None) -> None:
        """File the page in its tier queue (``code``: that queue's, when the caller knows it) and its pool
        membership, touching it there."""
        page = meta.page
        if page >= len(self.code):
            self._ensure(page)
        self.code_bytes[page] = CODES_OF[self._queue(meta)] if code is None else code
        self._touch_one(page, False)
        pooled = self.pooled
        if meta.pooled:
            if page not in pooled:
                pooled.add(page)
                self.in_pool_bytes[page] = 1
                self._touch_one(page, True)
        elif page in pooled:
            pooled.discard(page)
            self.in_pool_bytes[page] = 0
            self.order["pool"].pop(page, None)

    def _flush(self, pool: bool) -> None:
        """The buffered touches of the tier queues (``pool``: of the pool's) applied: the queues a
        decision reads are as if every touch had moved its page at once.  (The other queues' touches
        wait for a decision that reads them: applied later, in stamp order behind the pages not
        touched since, they give the same order.)"""
        if pool:
            if self.pool_touched:
                pool_queue = self.order["pool"]
                pending = self._pending(self.pool_touched, self.pool_bulk)
                listed = filter(self.pooled.__contains__, pending) if isinstance(pending, list) else \
                    pending[self.in_pool[pending]].tolist()
                for page in listed:
                    pool_queue.pop(page, None)
                    pool_queue[page] = None
            self.held[1] = 0
            return
        self.deciding = True
        if self.touched:
            pending = self._pending(self.touched, self.bulk)
            if isinstance(pending, list):  # a few: page by page
                self._file_each(pending)
            else:
                self._file_many(pending)
        self.held[0] = 0

    def _file_each(self, pages: Sequence[int]) -> None:
        """Distinct ``pages`` (in touch order), each out of the queue it sits in and into its new one, in
        Python (a few)."""
        code, filed, queues = self.code_bytes, self.filed_bytes, self.queues
        for page in pages:
            new, old = code[page], filed[page]
            if old:
                del queues[old][page]
            if new:
                queues[new][page] = None
            if old != new:
                filed[page] = new

    def _file_many(self, pages: np.ndarray) -> None:
        """Distinct ``pages`` (in touch order) out of the queues they sit in, then into their new ones in
        that order, by the queue (each queue's pages by one bulk call)."""
        queues, filed = self.queues, self.filed
        news, olds = self.code[pages], filed[pages]
        filed[pages] = news
        counts = np.bincount(olds, minlength=len(QUEUES)).tolist()
        for c in range(1, len(QUEUES)):
            if counts[c]:
                deque(map(queues[c].__delitem__, pages[olds == c].tolist()), 0)
        counts = np.bincount(news, minlength=len(QUEUES)).tolist()
        for c in range(1, len(QUEUES)):
            if counts[c]:
                queues[c].update(dict.fromkeys(pages[news == c].tolist()))

    def on_insert(self, meta: PageMeta) -> None:
        self._place(meta)

    def on_access(self, meta: PageMeta, now: int) -> None:
        page = meta.page
        if page >= len(self.code):
            self._ensure(page)
        if self.code_bytes[page]:
            self._touch_one(page, False)
        if page in self.pooled:
            self._touch_one(page, True)

    def on_access_many(self, metas: Sequence[PageMeta], now: int) -> None:
        # up to 8 pages: each page's tier touch, then its pool touch (as ``on_access`` one at a time);
        # more: the tier touches of all, then their pool touches (the queues' orders are the same)
        if len(metas) > self.eager:  # many: stamped with numpy (the ufunc's reduction: no Python wrapper)
            idx = page_array(metas)
            self._ensure(int(np.maximum.reduce(idx)))
            self._touch_many(idx[self.code[idx] != 0], False)
            if self.pooled:
                self._touch_many(idx[self.in_pool[idx]], True)
            return
        pages = _page_ids(metas)
        if not pages:
            return
        top = max(pages)
        if top >= len(self.code):
            self._ensure(top)
        code, pooled = self.code_bytes, self.pooled
        if len(pages) > 8:  # the tier touches, then the pool's (``_touch_many``: moved at once while nothing
            # is buffered for those queues, else buffered)
            self._touch_many([page for page in pages if code[page]], False)
            if pooled:
                self._touch_many([page for page in pages if page in pooled], True)
            return
        if not self.touched and not self.pool_touched:  # up to 8, nothing buffered: each page moved at
            # once (``_touch_one`` inlined)
            clock, stamps, filed, queues = self.clock, self.stamp_cells, self.filed_bytes, self.queues
            for page in pages:
                new = code[page]
                if new:
                    clock += 1
                    stamps[page] = clock
                    old = filed[page]
                    if old:
                        del queues[old][page]
                    queues[new][page] = None
                    if old != new:
                        filed[page] = new
                if page in pooled:
                    clock += 1
                    self.pool_stamp_cells[page] = clock
                    queue = self.order["pool"]
                    queue.pop(page, None)
                    queue[page] = None
            self.clock = clock
            return
        touch = self._touch_one
        for page in pages:
            if code[page]:
                touch(page, False)
            if page in pooled:
                touch(page, True)

    def on_written(self, fresh: Sequence[PageMeta], crossed: Sequence[PageMeta], pages: Sequence[PageMeta],
                   now: int) -> None:
        # each fresh page's queue written as insert-then-hold leaves it; its touches are those of the
        # access that follows (a later touch of the same page supersedes an earlier one), except for a
        # page in no queue, which the access skips: its insert's touch kept, ahead of the accesses.
        # A fresh page in the pool, one not crossed or not accessed: the three notices in turn.
        if not fresh:
            self.on_access_many(pages, now)
            return
        fresh_pages = _page_ids(fresh)
        if len(crossed) != len(fresh_pages) or not self.pooled.isdisjoint(fresh_pages) or \
                any(map(_POOLED, fresh)) or not set(fresh_pages).issubset(_page_ids(pages)):
            EvictionPolicy.on_written(self, fresh, crossed, pages, now)
            return
        top = max(fresh_pages)
        if top >= len(self.code):
            self._ensure(top)
        code = self.code_bytes
        for meta in fresh:
            tier = meta.tier
            new = HOT if tier == "gpu" else CODES_OF.get(tier, 0)
            code[meta.page] = new
            if not new:
                self._touch_one(meta.page, False)
        self.on_access_many(pages, now)

    def on_update(self, meta: PageMeta) -> None:
        tier = meta.tier  # ``on_update_many((meta,))`` inlined (a page admitted or evicted alone)
        new = (HOT if meta.holders else COLD) if tier == "gpu" else TIER_CODES.get(tier, 0)
        page = meta.page
        if page >= len(self.code):
            self._ensure(page)
        if self.code_bytes[page] != new or meta.pooled != (page in self.pooled):
            self._place(meta, new)

    def on_update_many(self, metas: Sequence[PageMeta]) -> None:
        self._place_many(metas, False)

    def _place_many(self, metas: Sequence[PageMeta], every: bool) -> None:
        """``_place`` of each page, in order, whose queue or pool membership changed (``every``: of each
        page), its queue's code read from its tier and holders (``_queue`` inlined), and its touches
        (``_touch_one``'s) inlined: moved at once while nothing is buffered for those queues (filed by
        ``_file_each`` after the loop, in the same order), else buffered; whether the touches buffer
        cannot change along the way (a buffered touch keeps them buffered), and the buffers are
        compacted, if at all, once at the end (the order they give is the same)."""
        pooled, code = self.pooled, self.code_bytes
        stamps, pool_stamps, pool_queue = self.stamp_cells, self.pool_stamp_cells, self.order["pool"]
        touched, pool_touched = self.touched, self.pool_touched
        refiled: list[int] = []  # pages moved at once (nothing buffered), filed after the loop in this order
        buffered, pool_buffered = bool(touched), bool(pool_touched)
        clock, counts, size = self.clock, (len(touched), len(pool_touched)), len(code)
        for meta in metas:
            tier = meta.tier
            new = (HOT if meta.holders else COLD) if tier == "gpu" else TIER_CODES.get(tier, 0)
            page = meta.page
            if page >= size:
                self._ensure(page)
                code, stamps, pool_stamps = self.code_bytes, self.stamp_cells, self.pool_stamp_cells
                size = len(code)
            joins = meta.pooled
            was = page in pooled
            if not every and code[page] == new and joins == was:
                continue
            code[page] = new
            clock += 1
            stamps[page] = clock
            (touched if buffered else refiled).append(page)
            if joins:
                if not was:
                    pooled.add(page)
                    self.in_pool_bytes[page] = 1
                    clock += 1
                    pool_stamps[page] = clock
                    if pool_buffered:
                        pool_touched.append(page)
                    else:
                        pool_queue.pop(page, None)
                        pool_queue[page] = None
            elif was:
                pooled.discard(page)
                self.in_pool_bytes[page] = 0
                pool_queue.pop(page, None)
        self.clock = clock
        if refiled:  # the tier queues only: the pool's, filed in the loop, is another queue
            self._file_each(refiled)
        if buffered or pool_buffered:
            held = self.held
            held[0] += len(touched) - counts[0]
            held[1] += len(pool_touched) - counts[1]
            if held[0] + held[1] > 65536 and held[0] + held[1] > 65536 + 4 * (self._filed() + len(self.pooled)):
                self._compact()

    def on_sealed_many(self, metas: Sequence[PageMeta]) -> None:
        # the order reads only a page's tier, holders and pool membership, none of which a seal changes
        # (a subclass that reads updates is told them)
        if self.reads_updates:
            self.on_update_many(metas)

    def on_holders_many(self, metas: Sequence[PageMeta], crossed: Sequence[PageMeta]) -> None:
        # only a page on the GPU that crossed changes queue (cold <-> hot): re-filed at once, in bulk;
        # a page is on the GPU exactly when its queue is one of the GPU's (placed from its tier)
        if not crossed:
            return
        new = HOT if crossed[0].holders else COLD
        if len(crossed) <= self.eager:  # a page opened or a short prefix: scalar reads cost less than numpy's
            pages = _page_ids(crossed)
            top = max(pages)
            if top >= len(self.code):
                self._ensure(top)
            code = self.code_bytes
            gpu = [page for page in pages if code[page] == HOT or code[page] == COLD]
            for page in gpu:
                code[page] = new
            self._touch_many(gpu, False)
            return
        idx = page_array(crossed)
        self._ensure(int(np.maximum.reduce(idx)))
        codes = self.code[idx]
        gpu_ids = idx[(codes == HOT) | (codes == COLD)]
        if len(gpu_ids):
            self.code[gpu_ids] = new
            self._touch_many(gpu_ids, False)

    def on_move(self, meta: PageMeta, old_tier: str) -> None:
        self._place(meta)

    def on_move_many(self, metas: Sequence[PageMeta], old_tiers: Sequence[str]) -> None:
        # each page's queue written and its touch stamped, in order, as ``on_move`` one at a time does
        # (a page whose pool membership is out of date on the way: one at a time, as ``_place`` does)
        if len(metas) <= self.moves_placed:  # up to a room's worth: one loop costs less than the bulk's lists
            self._place_many(metas, True)
            return
        pages = _page_ids(metas)
        if list(map(_POOLED, metas)) != list(map(self.pooled.__contains__, pages)):
            self._place_many(metas, True)
            return
        top = max(pages)
        if top >= len(self.code):
            self._ensure(top)
        codes = [(HOT if meta.holders else COLD) if (tier := meta.tier) == "gpu" else TIER_CODES.get(tier, 0)
                 for meta in metas]
        idx = np.fromiter(pages, dtype=np.int64, count=len(pages))
        self.code[idx] = codes
        self._touch_many(idx, False, at_once=True)  # (a room's moves: a decision soon reads the queues)

    def on_remove(self, meta: PageMeta) -> None:
        self._remove_each((meta.page,))

    def _remove_each(self, pages: Sequence[int]) -> None:
        """``pages`` out of every queue, the pool and the columns, page by page (scalar writes to the
        columns' bytes): a touch still buffered then finds no queue and is skipped."""
        top = max(pages, default=-1)
        if top >= len(self.code):
            self._ensure(top)
        code, in_pool, filed, queues = self.code_bytes, self.in_pool_bytes, self.filed_bytes, self.queues
        pooled, pop = self.pooled, self.order["pool"].pop
        for page in pages:
            code[page] = 0
            in_pool[page] = 0
            old = filed[page]
            if old:
                filed[page] = 0
                del queues[old][page]
            pooled.discard(page)
            pop(page, None)

    def propose_first(self, decision: str, k: int) -> list[int]:
        self._flush(decision == "pool")
        if decision == "gpu":
            return list(islice(chain(self.order["gpu_cold"], self.order["gpu_hot"]), k))
        return list(islice(self.order[decision], k))

    def propose(self, decision: str) -> Iterator[int]:
        self._flush(decision == "pool")
        names = ("gpu_cold", "gpu_hot") if decision == "gpu" else (decision,)
        seen: set[int] = set()
        for name in names:
            yield from _fresh(self.order[name], seen)

    def on_remove_many(self, metas: Sequence[PageMeta]) -> None:
        pages = _page_ids(metas)
        if len(pages) <= self.removes_scalar:  # page by page, as ``on_remove`` does
            self._remove_each(pages)
            return
        self._ensure(max(pages))
        self.code[pages] = 0
        self.in_pool[pages] = False
        olds = self.filed[pages].tolist()
        self.filed[pages] = 0
        queues, pool = self.queues, self.order["pool"]
        for page, old in zip(pages, olds, strict=True):
            if old:
                del queues[old][page]
            pool.pop(page, None)
        self.pooled.difference_update(pages)


QUEUES: tuple[str | None, ...] = (None, "gpu_cold", "gpu_hot", "host", "disk")  # LRU's tier queues by code
CODES = {name: code for code, name in enumerate(QUEUES) if name is not None}
CODES_OF: dict[str | None, int] = {name: code for code, name in enumerate(QUEUES)}
COLD, HOT = CODES["gpu_cold"], CODES["gpu_hot"]
BULK = -1  # in a touched list: the next array of its bulk list (a long notice's pages), never a page id
_POOLED = attrgetter("pooled")
TIER_CODES = {"host": CODES["host"], "disk": CODES["disk"]}  # the queue of a page off the GPU on that tier


def _page_ids(metas: Sequence[PageMeta]) -> list[int]:
    """``page_ids`` with the two shapes the seam sends (a ``MetaBatch``, a list of records) told apart by
    their class, not by an ``isinstance`` of the abstract ``Sequence`` (a notice's fixed cost)."""
    cls = metas.__class__
    if cls is MetaBatch:
        return metas.pages  # type: ignore[attr-defined,no-any-return]
    if cls is list:
        return [meta.page for meta in metas]
    return page_ids(metas)


def _codes(n: int) -> tuple[bytearray, np.ndarray]:
    """A column of ``n`` queue codes, zero: its bytes and an int8 numpy view of them."""
    raw = bytearray(n)
    return raw, np.frombuffer(raw, dtype=np.int8)


def _flags(n: int) -> tuple[bytearray, np.ndarray]:
    """A column of ``n`` flags, False: its bytes and a bool numpy view of them."""
    raw = bytearray(n)
    return raw, np.frombuffer(raw, dtype=bool)


def _stamps(n: int) -> tuple[array, np.ndarray]:
    """A column of ``n`` stamps, zero: its cells (single writes cost less there) and an int64 numpy view."""
    raw = array("q", bytes(8 * n))
    return raw, np.frombuffer(raw, dtype=np.int64)


def _fresh(queue: dict[int, None], seen: set[int], chunk: int = 4) -> Iterator[int]:
    """The queue's ids in order, each once, while the consumer may change the queue between proposals
    (read a chunk at a time from the front, the chunk doubling each time: the first proposal is
    usually taken; what was already proposed is skipped)."""
    while True:
        batch = [p for p in islice(queue, len(seen) + chunk) if p not in seen]
        if not batch:
            return
        for pid in batch:
            if pid in queue and pid not in seen:
                seen.add(pid)
                yield pid
        chunk = min(2 * chunk, 1024)

