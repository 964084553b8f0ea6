"""Page records: the chain facts and policy metadata of every live page (the spec state is in the
state store, the payload in the tiers).

::

    page id   parent  depth  hash        token_ids     gpu slot  checksum   its PageMeta fields
    7         -1      0      0x3fa1...   (1, 2, 3, 4)  5         -          tier gpu, pooled, 2 uses
    12        7       1      None        [5, 6]        9         -          tier gpu, filling

A page's parent is the page at the block before it in the sequence that wrote it; its chain hash is
set when it is sealed.  Children keep their parent alive (the collector never forgets a page with
live children), so every live page's chain of ancestors exists.

One object a page: the record *is* the page's ``PageMeta`` (what a policy is shown), and its token
ids are a list while it fills, a tuple once it is sealed (a tuple of ints is untracked by the
garbage collector).  Tens of thousands of live pages then cost the collector one container each,
where a record, a separate metadata object and a token list cost three.

The metadata the runtime updates for many pages at once (``last_use``, ``uses``, ``holders``: a
lookup touches its whole hit, an attach a whole prefix) lives in numpy columns; a live page's
record reads them, so a policy sees the current values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from .errors import UnknownPageError
from .metabatch import MetaBatch
from .policy import PageMeta

_NO_TYPES: frozenset[str] = frozenset()


class MetaColumns:
    """``last_use``, ``uses`` and ``holders`` of every page id."""

    def __init__(self, capacity: int = 64) -> None:
        self.last_use = np.zeros(capacity, dtype=np.int64)
        self.uses = np.zeros(capacity, dtype=np.int64)
        self.holders = np.zeros(capacity, dtype=np.int64)

    def ensure(self, pid: int) -> None:
        """Room for page id ``pid``."""
        size = len(self.uses)
        if pid >= size:
            new = max(2 * size, pid + 1)
            for name in ("last_use", "uses", "holders"):
                col = np.zeros(new, dtype=np.int64)
                col[:size] = getattr(self, name)
                setattr(self, name, col)


class LivePageMeta(PageMeta):
    """A live page's PageMeta: ``last_use``, ``uses`` and ``holders`` read from the columns."""

    __slots__ = ("cols",)

    # each column's accessors written out (no ``getattr`` of the column's name a read: policies read
    # them for every page they look at)
    @property  # type: ignore[override]
    def last_use(self) -> int:
        return self.cols.last_use.item(self.page)  # type: ignore[no-any-return]

    @last_use.setter
    def last_use(self, value: int) -> None:
        self.cols.last_use[self.page] = value

    @property  # type: ignore[override]
    def uses(self) -> int:
        return self.cols.uses.item(self.page)  # type: ignore[no-any-return]

    @uses.setter
    def uses(self, value: int) -> None:
        self.cols.uses[self.page] = value

    @property  # type: ignore[override]
    def holders(self) -> int:
        return self.cols.holders.item(self.page)  # type: ignore[no-any-return]

    @holders.setter
    def holders(self, value: int) -> None:
        self.cols.holders[self.page] = value

    def __init__(self, cols: MetaColumns, page: int, depth: int, **kwargs: Any) -> None:
        cols.ensure(page)
        self.cols = cols
        super().__init__(page, depth, **kwargs)


class PageRecord(LivePageMeta):
    """Chain facts of one page: where it sits, what it holds, where its payload is; and its policy
    metadata (``meta`` is the record itself; ``tokens`` there is how many it holds, ``token_ids``
    which; ``hash`` is its chain hash, None until it is sealed)."""

    __slots__ = ("pid", "parent", "parent_hash", "token_ids", "children", "gpu_slot", "checksum")

    def __init__(self, cols: MetaColumns, pid: int, parent: int, parent_hash: int, depth: int, **kwargs: Any) -> None:
        cols.ensure(pid)
        self.cols = cols
        PageMeta.__init__(self, pid, depth, **kwargs)
        self.pid = pid
        self.parent = parent  # page id of the block before it, -1 at depth 0
        self.parent_hash = parent_hash
        self.token_ids: list[int] | tuple[int, ...] = []  # a list while filling, a tuple once sealed
        self.children = 0  # live pages whose parent this page is
        self.gpu_slot = -1  # GPU pool slot while the page occupies one
        self.checksum: int | None = None  # checksum of the payload when it left the GPU

    @classmethod
    def opened(cls, cols: MetaColumns, pid: int, parent: int, parent_hash: int, depth: int, session: str | None,
               task: str | None, writer: str | None, nbytes: int) -> PageRecord:
        """The record of a page a writer opens: what the constructor makes with these PageMeta fields
        and every other at its default (``tokens`` 0, no types, created 0 on the GPU, nothing pooled or
        held, no hash), its slots set one by one instead of through PageMeta's keyword constructor (a
        long write opens one a page; ``test_runtime_pagewrite`` holds the two equal)."""
        cols.ensure(pid)
        rec = cls.__new__(cls)
        rec.cols = cols
        rec.page, rec.depth, rec.tokens, rec.types = pid, depth, 0, _NO_TYPES
        rec.session, rec.task, rec.writer, rec.created = session, task, writer, 0
        rec.tier, rec.bytes, rec.recovery_tokens, rec.pooled, rec.hash = "gpu", nbytes, 0, False, None
        cols.last_use[pid] = cols.uses[pid] = cols.holders[pid] = 0
        rec.pid, rec.parent, rec.parent_hash, rec.token_ids = pid, parent, parent_hash, []
        rec.children, rec.gpu_slot, rec.checksum = 0, -1, None
        return rec

    @classmethod
    def opened_run(cls, cols: MetaColumns, pids: list[int], parent: int, parent_hashes: list[int], depth: int,
                   session: str | None, task: str | None, writer: str | None, nbytes: int,
                   slots: list[int] | None = None) -> list[PageRecord]:
        """``opened`` for a run of pages a writer opens one after the other: page ``pids[j]`` at depth
        ``depth + j``, after ``pids[j - 1]`` (``parent`` for the first), continuing ``parent_hashes[j]``
        (and, given ``slots``, in GPU slot ``slots[j]``); the columns made room for and reset once for
        them all."""
        size = len(cols.uses)
        if pids and max(pids) >= size:
            for pid in pids:  # grown as ``opened`` page by page grows it
                if pid >= size:
                    cols.ensure(pid)
                    size = len(cols.uses)
        if len(pids) < 8:  # a few: page by page (an array's fixed cost would dominate)
            last_use, uses, holders = cols.last_use, cols.uses, cols.holders
            for pid in pids:
                last_use[pid] = uses[pid] = holders[pid] = 0
        else:
            at = np.fromiter(pids, dtype=np.int64, count=len(pids))
            cols.last_use[at] = 0
            cols.uses[at] = 0
            cols.holders[at] = 0
        new = cls.__new__
        out = []
        for pid, parent_hash, slot in zip(pids, parent_hashes, slots or [-1] * len(pids), strict=True):
            rec = new(cls)  # (one store a slot: no tuple built and unpacked)
            rec.cols = cols
            rec.page = rec.pid = pid
            rec.depth = depth
            rec.tokens = rec.created = rec.recovery_tokens = rec.children = 0
            rec.types = _NO_TYPES
            rec.session = session
            rec.task = task
            rec.writer = writer
            rec.tier = "gpu"
            rec.bytes = nbytes
            rec.pooled = False
            rec.hash = rec.checksum = None
            rec.parent = parent
            rec.parent_hash = parent_hash
            rec.token_ids = []
            rec.gpu_slot = slot
            out.append(rec)
            parent = pid
            depth += 1
        return out

    @property
    def meta(self) -> PageRecord:
        """The page's PageMeta: the record itself."""
        return self

    def extend(self, tokens: Iterable[int]) -> int:
        """The filling page takes ``tokens`` after its own; how many it holds now."""
        held = self.token_ids
        assert isinstance(held, list), f"page {self.pid} is sealed"
        held.extend(tokens)
        return len(held)


class PageDirectory:
    """The records of every live page, by id, and their metadata columns."""

    def __init__(self, capacity: int = 64) -> None:
        self.records: dict[int, PageRecord] = {}
        self.cols = MetaColumns(capacity)
        # ``find(pid)``: the record of ``pid`` if it is live, else None (the map's own look-up: no frame)
        self.find: Callable[[int], PageRecord | None] = self.records.get

    def metas_of(self, pids: Iterable[int] | None, ids: np.ndarray | None = None) -> MetaBatch:
        """The PageMeta of each of ``pids`` (live pages; ``ids`` the same as an array, ``pids`` None
        when only the array is at hand), each read when it is read."""
        return MetaBatch(None if pids is None else list(pids), self.records.__getitem__, ids)

    def __len__(self) -> int:
        return len(self.records)

    def __contains__(self, pid: object) -> bool:
        return pid in self.records

    def __iter__(self) -> Iterator[int]:
        return iter(self.records)

    def add(self, record: PageRecord) -> None:
        """Register a new page record (its id was just allocated in the state store)."""
        self.records[record.pid] = record
        if record.parent >= 0:
            self.records[record.parent].children += 1

    def add_run(self, recs: list[PageRecord], pids: list[int]) -> None:
        """``add`` for each of ``recs``, a run of pages each the parent of the next (``pids`` their ids)."""
        records = self.records
        records.update(zip(pids, recs, strict=True))
        if recs and recs[0].parent >= 0:
            records[recs[0].parent].children += 1
        for rec in recs[:-1]:
            rec.children += 1

    def remove(self, pid: int) -> PageRecord:
        """Forget a page record (and its link to its parent)."""
        record = self.records.pop(pid)
        parent = self.records.get(record.parent)
        if parent is not None:
            parent.children -= 1
        return record

    def get(self, pid: object) -> PageRecord:
        """The record of a live page; UnknownPageError for anything else."""
        record = self.records.get(pid) if isinstance(pid, int) and not isinstance(pid, bool) else None  # type: ignore[arg-type]
        if record is None:
            raise UnknownPageError(f"no live page with id {pid!r}")
        return record

