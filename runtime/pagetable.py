"""The metadata table: the spec state of every physical page, stored by column, plus its chain facts.

State and data are separate: this table holds only metadata (one Python list per spec variable or
per-page object, indexed by page id); payloads live in the page stores.  A freed id is reset to the
spec's initial values, so the table read as a whole is itself a valid spec state in which unused
ids are untouched pages::

    page id      0        1        2        3 (free)
    tail       sealed   sealed   filling   empty
    tier       gpu      host     gpu       gpu
    pin        1        0        0         0
    depth      0        1        2         -      block index p of the page in any sequence view
"""

from __future__ import annotations

from .compiler import CompiledSpec


class PageInfo:
    """Chain facts of one page: where it sits, what it holds, who refers to it."""

    __slots__ = ("pid", "depth", "parent", "parent_hash", "hash", "tokens", "seqs", "children",
                 "tick", "gpu_slot", "checksum")

    def __init__(self, pid: int, depth: int, parent: int, parent_hash: int) -> None:
        self.pid = pid
        self.depth = depth
        self.parent = parent  # page id of block depth-1 in the sequence that wrote it, -1 at depth 0
        self.parent_hash = parent_hash
        self.hash: int | None = None  # chain hash, set when the page is sealed
        self.tokens: list[int] = []
        self.seqs: dict[str, object] = {}  # live sequences holding the page, by id
        self.children = 0  # pages whose parent is this page
        self.tick = 0  # last use, for LRU policies
        self.gpu_slot = -1  # GPU pool slot while the page occupies one
        self.checksum: int | None = None  # checksum of the payload when it left the GPU


class PageTable:
    """Columns of spec state, page ids with a free list, and the chain facts of each live page."""

    def __init__(self, cspec: CompiledSpec) -> None:
        self.cspec = cspec
        self.init = dict(cspec.page_init)
        self.cols: dict[str, list[object]] = {name: [] for name in self.init}
        self.info: dict[int, PageInfo] = {}
        self.free_ids: list[int] = []
        self.masks: list[int | None] = []
        self.dirty_agg: set[int] = set()
        self.mask_vars = cspec.lookup.reads
        self.agg_vars = frozenset(v for agg in cspec.aggregates.values() for v in agg.reads)

    def __len__(self) -> int:
        return len(self.info)

    @property
    def size(self) -> int:
        """Number of ids ever handed out (the global view's page count)."""
        return len(self.masks)

    def alloc(self, depth: int, parent: int, parent_hash: int) -> int:
        """A fresh page id in the spec's initial state (reused from the free list when possible)."""
        if self.free_ids:
            pid = self.free_ids.pop()
        else:
            pid = len(self.masks)
            for name, col in self.cols.items():
                col.append(self.init[name])
            self.masks.append(None)
        self.info[pid] = PageInfo(pid, depth, parent, parent_hash)
        self.dirty_agg.add(pid)
        return pid

    def release(self, pid: int) -> None:
        """Forget page ``pid``: its columns go back to the initial values and the id is reusable."""
        del self.info[pid]
        for name, col in self.cols.items():
            col[pid] = self.init[name]
        self.masks[pid] = None
        self.dirty_agg.add(pid)
        self.free_ids.append(pid)

    def write(self, pid: int, name: str, value: object) -> None:
        """Set one spec value of one page and invalidate what was derived from it."""
        self.cols[name][pid] = value
        if name in self.mask_vars:
            self.masks[pid] = None
        if name in self.agg_vars:
            self.dirty_agg.add(pid)

    def get(self, pid: int, name: str) -> object:
        """One spec value of one page."""
        return self.cols[name][pid]
