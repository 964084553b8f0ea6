"""Moving pages between tiers: offload, spill, prefetch (asynchronous), drop, evict, recompute.

::

    offload:   gpu --offload--> offloading --offload_done--> host [--spill--> disk]
               payload copied to the host (and written to disk) with its checksum recorded
    prefetch:  host|disk --prefetch--> prefetching   (slot reserved, copy on a worker thread)
               worker: copy -> copy_done -> checksum ok? verify : -
                       land (guard: copied and verified) -> gpu, else corrupt -> dropped
    drop:      gpu|host|disk --drop--> dropped      (payload freed; recompute rebuilds it)

Every arrow is a spec event; the policies here only choose which page to propose.
"""

from __future__ import annotations

from concurrent.futures import Future

from . import binding as B
from .base import ManagerBase
from .errors import BadInputError, CapacityError, GuardRefused, TierError
from .store import checksum


class TieringOps(ManagerBase):
    """Tier moves and the policies that make room in a full tier."""

    # -- offload ------------------------------------------------------------------------------------
    def _offload(self, pid: int, to: str, protect: frozenset[int] | set[int] = frozenset()) -> None:
        if not isinstance(to, str) or to not in ("host", "disk"):
            raise BadInputError(f"offload target must be 'host' or 'disk', got {to!r}")
        if to == "disk" and self.disk is None:
            raise TierError("no disk tier configured (RuntimeConfig.disk_dir / disk_pages)")
        if self.config.host_pages == 0:
            raise TierError("no host tier configured (RuntimeConfig.host_pages is 0)")
        info = self.pages.info[pid]
        if not self.core.allowed("offload", pid):
            self._fire("offload", pid)  # raises the spec's refusal
        self._room_host(protect | {pid})
        self._fire("offload", pid)
        data = self.store.read(info.gpu_slot)
        info.checksum = checksum(data)
        self.host.put(pid, data)
        self._fire("offload_done", pid)
        self._unplace(pid)
        self.host_lru[pid] = None
        self.stats.bytes_moved["gpu->host"] += len(data)
        if to == "disk":
            self._spill(pid, protect)

    def _spill(self, pid: int, protect: frozenset[int] | set[int] = frozenset()) -> None:
        assert self.disk is not None
        info = self.pages.info[pid]
        data = self.host.get(pid)
        if data is None or info.checksum is None:
            raise TierError(f"page {pid} has no host copy to spill")
        self._room_disk(protect | {pid})
        if not self.core.allowed("spill", pid):
            self._fire("spill", pid)
        self.disk.put(pid, data, info.checksum)
        self._fire("spill", pid)
        self.host.remove(pid)
        self.host_lru.pop(pid, None)
        self.disk_lru[pid] = None
        self.stats.bytes_moved["host->disk"] += len(data)

    def _room_host(self, protect: frozenset[int] | set[int]) -> None:
        while self.host.full:
            victim = next((p for p in self.host_lru if p not in protect and p not in self.inflight), None)
            if victim is None:
                raise CapacityError(f"host tier full ({self.host.capacity} pages), nothing can leave it")
            if self.disk is not None:
                self._spill(victim, protect)
            else:
                self._drop(victim)
                self._collect(victim)

    def _room_disk(self, protect: frozenset[int] | set[int]) -> None:
        assert self.disk is not None
        while self.disk.full:
            victim = next((p for p in self.disk_lru if p not in protect and p not in self.inflight), None)
            if victim is None:
                raise CapacityError(f"disk tier full ({self.disk.capacity} pages), nothing can leave it")
            self._drop(victim)
            self._collect(victim)

    # -- drop / evict -------------------------------------------------------------------------------
    def _drop(self, pid: int) -> None:
        self._fire("drop", pid)
        self._forget_payload(pid)

    def _reclaim_gpu(self, protect: frozenset[int] | set[int]) -> bool:
        """Free one GPU slot: offload (or drop) the least recently used page the spec lets go."""
        host = self.config.host_pages > 0
        tried: set[int] = set()
        for lru in (self.cold, self.hot):
            while True:
                victim = next((p for p in lru if p not in protect and p not in self.inflight and p not in tried
                               and (self.core.allowed("offload", p) or self.core.allowed("drop", p))), None)
                if victim is None:
                    break
                tried.add(victim)
                if host and self.core.allowed("offload", victim):
                    try:
                        self._offload(victim, "host", protect)
                        return True
                    except (GuardRefused, CapacityError):
                        pass
                if self.core.allowed("drop", victim):
                    self._drop(victim)
                    self._collect(victim)
                    return True
        return False

    # -- prefetch -----------------------------------------------------------------------------------
    def _prefetch(self, pid: int, protect: frozenset[int] | set[int] = frozenset()) -> Future[None]:
        existing = self.inflight.get(pid)
        if existing is not None:
            return existing
        source = self.cols[B.TIER][pid]
        if source not in ("host", "disk") or not self.core.allowed("prefetch", pid):
            self._fire("prefetch", pid)  # raises the spec's refusal
        slot = self._take_slot(pid, protect)
        try:
            self._fire("prefetch", pid)
        except GuardRefused:
            self.slots.give(slot)
            raise
        self._place(pid, slot)
        fut: Future[None] = self.executor.submit(self._prefetch_job, pid, slot, str(source))
        self.inflight[pid] = fut
        return fut

    def _prefetch_job(self, pid: int, slot: int, source: str) -> None:
        """Worker: copy the payload into the reserved slot, then let the spec decide if it lands."""
        data = self.host.get(pid) if source == "host" else (self.disk.get(pid) if self.disk else None)
        if data is not None:
            self.store.write(slot, data)
        with self.lock:
            try:
                self._complete_prefetch(pid, slot, source, data)
            finally:
                self.inflight.pop(pid, None)
                self._collect(pid)

    def _complete_prefetch(self, pid: int, slot: int, source: str, data: bytes | None) -> None:
        info = self.pages.info[pid]
        self._fire("copy_done", pid)
        reason = None
        if data is None:
            reason = "missing"
        elif len(data) != self.page_bytes:
            reason = "truncated"
        elif checksum(self.store.read(slot)) != info.checksum:
            reason = "checksum"
        if reason is None:
            self._try("verify", pid)
        if self._try("land", pid):
            self.stats.bytes_moved[f"{source}->gpu"] += len(data or b"")
        else:
            self._fire("corrupt", pid)
            self.stats.corrupt_pages[reason or "refused"] += 1
            self._unplace(pid)
        self.host.remove(pid)
        self.host_lru.pop(pid, None)
        if self.disk is not None:
            self.disk.remove(pid)
        self.disk_lru.pop(pid, None)

    # -- recompute ----------------------------------------------------------------------------------
    def _recompute(self, pid: int, protect: frozenset[int] | set[int] = frozenset()) -> None:
        """Rebuild a dropped page from its tokens into a fresh slot (``recompute`` event)."""
        info = self.pages.info[pid]
        if not self.core.allowed("recompute", pid):
            self._fire("recompute", pid)
        slot = self._take_slot(pid, protect)
        try:
            self._fire("recompute", pid)
        except GuardRefused:
            self.slots.give(slot)
            raise
        self._place(pid, slot)
        self.store.recompute(slot, info.depth, info.tokens)
        self.stats.extra["recomputed_pages"] += 1
