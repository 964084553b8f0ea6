"""Manager state and the bookkeeping shared by every operation: firing, GPU slots, garbage collection.

A page record lives while something needs it::

    live  <=>  held by a live sequence  or  pooled  or  pinned  or  has child pages
               or  a copy is in flight

Once none holds, ``_collect`` drops the page (the spec's ``drop``, when its state allows), frees its
payload and id, and looks at its parent.  Children keep their parents so that every page's chain of
ancestors (its detached view, its hash chain) exists.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from morphcache.spec import loader
from morphcache.spec.loader import load_spec
from morphcache.spec.model import Spec

from . import binding as B
from .binding import check_binding
from .compiler import CompiledSpec
from .config import RuntimeConfig
from .core import Core, Sequence
from .errors import CapacityError, GuardRefused, UnknownPageError, UnknownSequenceError
from .index import ROOT_HASH, PrefixIndex
from .lease import Lease
from .metrics import Metrics
from .pagetable import PageInfo
from .search import HitSearch
from .store import MemoryPageStore, PageStore
from .tiers import DiskTier, HostTier, SlotPool

SHIPPED_SPEC = Path(loader.__file__).resolve().parent / "hybrid_single.yaml"  # installed beside morphcache.spec


def _load(spec: Spec | str | Path | None) -> Spec:
    if spec is None:
        return load_spec(SHIPPED_SPEC)
    if isinstance(spec, Spec):
        return spec
    return load_spec(spec)


class ManagerBase:
    """State of a CacheManager and its internal helpers (no public API here)."""

    def __init__(self, spec: Spec | str | Path | None = None, config: RuntimeConfig | None = None,
                 store: PageStore | None = None) -> None:
        self.config = config = config or RuntimeConfig()
        self.spec = spec_ = _load(spec)
        check_binding(spec_)
        self.constants = config.spec_constants(spec_.constants)
        self.cspec = CompiledSpec(spec_, self.constants)
        self.core = Core(self.cspec, config.backend, config.record, config.strict)
        self.pages = self.core.pages
        self.cols = self.core.cols
        self.C = config.page_size
        self.index = PrefixIndex(self.C)
        self.search = HitSearch(self.cspec.lookup, spec_.lookup, self.constants, self.C)
        self.slots = SlotPool(config.gpu_pages)
        self.store: PageStore = store if store is not None else MemoryPageStore(config.gpu_pages, self.C)
        self.page_bytes = config.page_bytes or self.store.page_bytes
        self.host = HostTier(config.host_pages)
        self.disk = (DiskTier(config.disk_dir, config.disk_pages)
                     if config.disk_dir and config.disk_pages else None)
        self.stats = Metrics()
        self.lock = threading.RLock()
        self.leases: dict[int, Lease] = {}
        self.executor = ThreadPoolExecutor(config.prefetch_workers, thread_name_prefix="morphcache-prefetch")
        self.inflight: dict[int, Future[None]] = {}
        self.pooled: OrderedDict[int, None] = OrderedDict()
        self.cold: OrderedDict[int, None] = OrderedDict()  # on the GPU, held by no live sequence (LRU)
        self.hot: OrderedDict[int, None] = OrderedDict()  # on the GPU, held by a live sequence (LRU)
        self.host_lru: OrderedDict[int, None] = OrderedDict()
        self.disk_lru: OrderedDict[int, None] = OrderedDict()
        self.held: Counter[int] = Counter()  # pages operations in progress need (never collected meanwhile)
        self.ident = id(self)
        self.clock = 0
        self._pool_events = frozenset(n for n, e in self.cspec.events.items() if B.POOL in e.writes)
        self._gen_events = frozenset(n for n, e in self.cspec.events.items() if B.GEN in e.writes)
        plain = not ({"append", "seal"} & (self._pool_events | self._gen_events))
        self._fire_append = self.core.fire if plain else self._fire
        self._fire_own = self.core.fast.fire_own if plain else self._fire
        self._objects = self.cspec.lookup.objects
        self._local_ready = [(i, self.cspec.lookup.ready[o]) for i, o in enumerate(self._objects)
                             if self.cspec.lookup.ready_local[o]]
        self._nonlocal_ready = [(i, self.cspec.lookup.ready[o]) for i, o in enumerate(self._objects)
                                if not self.cspec.lookup.ready_local[o]]
        self._pnames: dict[str, object] = dict(self.constants)
        self._ready_cols = [self.cols[v] for v in sorted(self.cspec.lookup.reads)]
        self._mask_memo: dict[tuple[object, ...], int] = {}

    # -- small helpers ----------------------------------------------------------------------------
    def _seq(self, sid: object) -> Sequence:
        seq = self.core.seqs.get(sid) if isinstance(sid, str) else None
        if seq is None:
            raise UnknownSequenceError(f"no live sequence with id {sid!r}")
        return seq

    def _info(self, pid: object) -> PageInfo:
        info = self.pages.info.get(pid) if isinstance(pid, int) and not isinstance(pid, bool) else None
        if info is None:
            raise UnknownPageError(f"no live page with id {pid!r}")
        return info

    def _fire(self, name: str, pid: int | None = None, seq: Sequence | None = None) -> None:
        """Fire a spec event and keep the manager's derived sets in step with what it wrote."""
        self.core.fire(name, pid, seq)
        if pid is None:
            return
        if name in self._pool_events:
            if self.cols[B.POOL][pid] == "pooled":
                self.pooled[pid] = None
                self.pooled.move_to_end(pid)
            else:
                self.pooled.pop(pid, None)
        if name in self._gen_events:
            slot = self.pages.info[pid].gpu_slot
            if slot >= 0:
                self.store.set_generation(slot, int(self.cols[B.GEN][pid]))  # type: ignore[call-overload]

    def _try(self, name: str, pid: int | None = None, seq: Sequence | None = None, *,
             likely: bool = True) -> bool:
        """Propose a step: fire it if the spec allows, report whether it fired.  ``likely`` False asks
        the guard first (cheaper than a refusal when refusals are the common case)."""
        if not likely and not self.core.allowed(name, pid, seq):
            return False
        try:
            self._fire(name, pid, seq)
        except GuardRefused:
            return False
        return True

    def _touch(self, pid: int) -> None:
        self.clock += 1
        self.pages.info[pid].tick = self.clock
        if pid in self.cold:
            self.cold.move_to_end(pid)
        elif pid in self.hot:
            self.hot.move_to_end(pid)
        if pid in self.pooled:
            self.pooled.move_to_end(pid)

    def _mask(self, pid: int) -> int:
        """Readiness bits of the page for the page-local ready predicates.

        Cached per page until one of the values the predicates read changes; the compiled predicates
        are evaluated once per distinct tuple of those values.
        """
        m = self.pages.masks[pid]
        if m is None:
            key = tuple([col[pid] for col in self._ready_cols])  # the values the ready predicates read
            m = self._mask_memo.get(key)
            if m is None:
                names = self._pnames
                names["p"] = pid
                m = 0
                for i, fn in self._local_ready:
                    if fn(names, self.cols):
                        m |= 1 << i
                if len(self._mask_memo) > 100_000:
                    self._mask_memo.clear()
                self._mask_memo[key] = m
            self.pages.masks[pid] = m
        return m

    # -- GPU slots ----------------------------------------------------------------------------------
    def _place(self, pid: int, slot: int) -> None:
        info = self.pages.info[pid]
        info.gpu_slot = slot
        (self.hot if info.seqs else self.cold)[pid] = None
        self.store.set_generation(slot, int(self.cols[B.GEN][pid]))  # type: ignore[call-overload]

    def _unplace(self, pid: int) -> None:
        info = self.pages.info[pid]
        if info.gpu_slot >= 0:
            self.store.free(info.gpu_slot)
            self.slots.give(info.gpu_slot)
            info.gpu_slot = -1
        self.cold.pop(pid, None)
        self.hot.pop(pid, None)

    def _refs_changed(self, pid: int) -> None:
        info = self.pages.info[pid]
        if info.gpu_slot < 0:
            return
        if info.seqs:
            self.cold.pop(pid, None)
            self.hot[pid] = None
        else:
            self.hot.pop(pid, None)
            self.cold[pid] = None

    def _take_slot(self, pid: int, protect: frozenset[int] | set[int]) -> int:
        """A GPU slot for ``pid``, reclaiming the least recently used unprotected page if the pool is
        full (cold pages first, then pages of live sequences)."""
        while not self.slots.free_slots:
            if not self._reclaim_gpu(protect | {pid}):
                raise CapacityError(
                    f"GPU pool full: none of its {self.slots.slots} pages can be offloaded or dropped "
                    "(pinned, being written, captured or protected)")
        return self.slots.take(pid)

    def _reclaim_gpu(self, protect: frozenset[int] | set[int]) -> bool:
        raise NotImplementedError

    # -- garbage collection -------------------------------------------------------------------------
    def _collectable(self, pid: int) -> bool:
        info = self.pages.info.get(pid)
        if info is None or info.seqs or info.children or pid in self.inflight:
            return False
        if self.held[pid] > 0:
            return False
        return self.cols[B.POOL][pid] != "pooled" and not self.cols[B.PIN][pid]

    def _collect(self, pid: int, keep: frozenset[int] = frozenset()) -> None:
        """Forget ``pid`` and then its ancestors, as long as nothing holds them (and not ``keep``)."""
        while pid >= 0 and pid not in keep and self._collectable(pid):
            info = self.pages.info[pid]
            tier = self.cols[B.TIER][pid]
            if tier in ("offloading", "prefetching"):
                return
            if tier != "dropped" and self.cols[B.TAIL][pid] not in ("empty", "filling"):
                if not self._try("drop", pid):
                    return
            self._forget_payload(pid)
            if info.hash is not None:
                self._unindex(pid, info.hash)
            self.index.remove_child(info.parent_hash, pid)
            parent = info.parent
            if parent >= 0:
                self.pages.info[parent].children -= 1
            self.pool_forget(pid)
            self.pages.release(pid)
            pid = parent

    def pool_forget(self, pid: int) -> None:
        """Drop ``pid`` from every LRU structure."""
        self.pooled.pop(pid, None)
        self.host_lru.pop(pid, None)
        self.disk_lru.pop(pid, None)

    def _forget_payload(self, pid: int) -> None:
        self._unplace(pid)
        self.host.remove(pid)
        self.host_lru.pop(pid, None)
        if self.disk is not None:
            self.disk.remove(pid)
        self.disk_lru.pop(pid, None)

    def _unindex(self, pid: int, h: int) -> None:
        """Remove the index entry of ``pid``; a sealed duplicate with the same hash takes over."""
        if self.index.by_hash.get(h) != pid:
            return
        self.index.remove_sealed(h, pid)
        info = self.pages.info[pid]
        for other in self.index.by_parent.get(info.parent_hash, {}):
            oi = self.pages.info.get(other)
            if other != pid and oi is not None and oi.hash == h:
                self.index.add_sealed(h, other)
                break

    def _parent_hash(self, block: list[int]) -> int:
        if not block:
            return ROOT_HASH
        h = self.pages.info[block[-1]].hash
        assert h is not None, "a page is opened only after its predecessor is sealed"
        return h
