"""Page records: the chain facts and policy metadata of every live page (the spec state is in the
state store, the payload in the tiers).

::

    page id   parent  depth  hash        tokens        gpu slot  checksum   meta (PageMeta)
    7         -1      0      0x3fa1...   [1, 2, 3, 4]  5         -          tier gpu, pooled, 2 uses
    12        7       1      None        [5, 6]        9         -          tier gpu, filling

A page's parent is the page at the block before it in the sequence that wrote it; its chain hash is
set when it is sealed.  Children keep their parent alive (the collector never forgets a page with
live children), so every live page's chain of ancestors exists.
"""

from __future__ import annotations

from collections.abc import Iterator

from .errors import UnknownPageError
from .policy import PageMeta


class PageRecord:
    """Chain facts of one page: where it sits, what it holds, where its payload is."""

    __slots__ = ("pid", "parent", "parent_hash", "hash", "tokens", "children", "gpu_slot", "checksum", "meta")

    def __init__(self, pid: int, parent: int, parent_hash: int, meta: PageMeta) -> None:
        self.pid = pid
        self.parent = parent  # page id of the block before it, -1 at depth 0
        self.parent_hash = parent_hash
        self.hash: int | None = None  # chain hash, set when the page is sealed
        self.tokens: list[int] = []
        self.children = 0  # live pages whose parent this page is
        self.gpu_slot = -1  # GPU pool slot while the page occupies one
        self.checksum: int | None = None  # checksum of the payload when it left the GPU
        self.meta = meta

    @property
    def depth(self) -> int:
        """Block index of the page in every chain holding it."""
        return self.meta.depth


class PageDirectory:
    """The records of every live page, by id."""

    def __init__(self) -> None:
        self.records: dict[int, PageRecord] = {}

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

    def find(self, pid: int) -> PageRecord | None:
        """The record of ``pid`` if it is live."""
        return self.records.get(pid)
