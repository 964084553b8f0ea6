"""Moving pages between tiers, transactionally: a move either completes or leaves the page where it
was and drops nothing.

::

    offload   gpu --offload--> offloading --offload_done--> host [--spill--> disk]
              bytes copied (host) or written (disk file) *first*; the events fire after, together
    spill     host --spill--> disk        file written first; a full disk's victim dropped after
    prefetch  host|disk --prefetch--> prefetching   (prefetch.py: a reserved slot, a worker's copy)
    drop      gpu|host|disk --drop--> dropped       (payload freed; recompute rebuilds it)
    recompute dropped --recompute--> gpu            (a fresh slot; the tokens prefilled again)

Room in a full tier comes from the policy (``seam.py``): each victim's own move is a complete move,
and a victim is dropped only once the page that needed the room is safely written.  Every arrow is
a spec event; nothing here decides what the spec allows.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from .collect import Busy, Collector
from .config import RuntimeConfig
from .errors import BadInputError, CapacityError, GuardRefused, TierError
from .metrics import Metrics
from .pages import PageDirectory, PageRecord
from .pipeline import Pipeline
from .roombatch import MOVES, make_room_batch, page_local
from .seam import PolicySeam
from .store import checksum
from .tiers import Storage


class TierMover:
    """Offload, spill, prefetch, drop, recompute, and room in a full tier."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, storage: Storage, seam: PolicySeam, busy: Busy,
                 collector: Collector, metrics: Metrics, config: RuntimeConfig, lock: threading.RLock) -> None:
        self.pipe, self.pages, self.storage, self.seam = pipe, pages, storage, seam
        self.busy, self.collector, self.metrics, self.config, self.lock = busy, collector, metrics, config, lock
        self.page_bytes = config.page_bytes or storage.data.page_bytes
        self.batchable = all(page_local(pipe.cspec.events[name]) for name in MOVES if name in pipe.cspec.events) \
            and all(name in pipe.cspec.events for name in MOVES)  # roombatch.py: room in one go is exact

    # -- GPU slots --------------------------------------------------------------------------------
    def take_slot(self, rec: PageRecord, protect: frozenset[int] | set[int]) -> int:
        """A free GPU slot for ``rec`` (the caller places it, and holds ``rec`` and ``protect``), making
        room by the policy's victims."""
        slots = self.storage.slots
        if not slots.free_slots:
            self.make_room(1, {*protect, rec.pid}, held=True)
        return slots.take(rec.pid)

    def make_room(self, need: int, protect: set[int] | frozenset[int], *, held: bool = False) -> None:
        """Free GPU slots until ``need`` are free: the policy's victims, each offloaded (or else dropped)
        in its own complete move, never a page of ``protect``; CapacityError when no victim is left.
        Room made in one go frees ``config.ahead`` pages more when it can (the same batch, so a refusal
        leaves nothing changed and the room is made without them).
        ``protect`` is held for the whole of it (``held``: the caller holds it already), each victim
        for its own move; room made in one go needs no hold (nothing is dropped or forgotten)."""
        slots = self.storage.slots
        short, ahead = need - len(slots.free_slots), self.config.ahead  # (ahead: a low watermark)
        if short <= 0 or (0 < ahead <= slots.used - short and make_room_batch(self, short + ahead, protect)) \
                or make_room_batch(self, short, protect):
            return  # (all the victims in one go when nothing tells it from one at a time)
        if not held:
            self.busy.hold(protect)
        try:
            while len(slots.free_slots) < need:
                if not self.reclaim_gpu(protect):
                    raise CapacityError(
                        f"GPU pool full: none of its {slots.slots} pages can be offloaded or dropped "
                        "(pinned, being written, captured, in flight or protected)")
        finally:
            if not held:
                self.release_held(protect)

    def reclaim_gpu(self, protect: set[int] | frozenset[int]) -> bool:
        """Free one GPU slot: offload (or else drop) the policy's first acceptable victim (the caller
        holds ``protect``)."""
        host = self.config.host_pages > 0
        victim = self.seam.choose("gpu", ("offload", "drop") if host else ("drop",), protect)
        if victim is None:
            return False
        if host and self.pipe.allowed("offload", None, victim):
            self.hold_one(victim)
            try:
                self._offload(victim, "host", protect, checked=True)
                return True
            except (GuardRefused, CapacityError, TierError):
                pass
            finally:
                self.release_held((victim,))
        if self.pipe.allowed("drop", None, victim):
            self.drop(victim)
            return True
        return False

    # -- offload and spill ------------------------------------------------------------------------
    @contextmanager
    def holding(self, pid: int, protect: frozenset[int] | set[int] = frozenset()) -> Iterator[None]:
        """Hold ``pid`` and ``protect`` while a move runs: dropping a victim may free its parent chain,
        never a page this move (or the one that needs its room) still uses.  What nothing holds any more
        afterwards (a ``collect`` found it held: ``Busy.deferred``) is collected then."""
        held = [pid, *protect] if protect else [pid]
        self.busy.hold(held)
        self.sweep()
        try:
            yield
        finally:
            self.release_held(held)

    def hold_one(self, pid: int) -> None:
        """``holding`` without the block: hold ``pid`` until ``release_held((pid,))``."""
        self.busy.hold((pid,))
        self.sweep()

    def sweep(self) -> None:
        """Retry clearing the disk tier's leftover records (what a move does first); the count kept."""
        disk = self.storage.disk
        if disk is not None and disk.leftovers:
            self.metrics.extra["disk_leftover_files"] = disk.sweep()

    def release_held(self, held: Iterable[int]) -> None:
        """End a hold of ``held``; collect the pages a ``collect`` found held and nothing holds now."""
        for q in self.busy.unhold(held):
            self.collector.collect(q)

    def offload(self, pid: int, to: str = "host", protect: frozenset[int] | set[int] = frozenset()) -> None:
        """Move a GPU page to the host (or through it to disk)."""
        with self.holding(pid, protect):
            self._offload(pid, to, protect)

    def _offload(self, pid: int, to: str, protect: frozenset[int] | set[int], checked: bool = False) -> None:
        """The move of ``offload`` (``pid`` and ``protect`` held; ``checked``: the spec allows it now)."""
        if not isinstance(to, str) or to not in ("host", "disk"):
            raise BadInputError(f"offload target must be 'host' or 'disk', got {to!r}")
        disk = self.storage.disk
        if to == "disk" and disk is None:
            raise TierError("no disk tier configured (RuntimeConfig.disk_dir / disk_pages)")
        if self.config.host_pages == 0:
            raise TierError("no host tier configured (RuntimeConfig.host_pages is 0)")
        rec = self.pages.get(pid)
        pipe = self.pipe
        if not checked and not pipe.allowed("offload", None, pid):
            pipe.fire("offload", None, pid)  # raises the spec's refusal
        data = self.storage.data.read(rec.gpu_slot)
        check = checksum(data)
        keep = {*protect, pid}
        victim = None
        if to == "host":
            self._room_host(keep)
            self.storage.host.put(pid, data)
        else:
            assert disk is not None
            victim = self._disk_victim(keep)
            disk.put(pid, data, check, over=victim is not None)
        sp = pipe.begin()
        try:
            pipe.fire("offload", None, pid)
            pipe.fire("offload_done", None, pid)
            if to == "disk":
                if victim is not None:
                    pipe.fire("drop", None, victim)
                pipe.fire("spill", None, pid)
        except BaseException:
            pipe.rollback(sp)
            self._unput(pid, to)
            raise
        pipe.commit()
        rec.checksum = check
        self.storage.free_slot(rec)
        self.seam.moved(rec, to)
        self.metrics.bytes_moved["gpu->host"] += len(data)
        if to == "disk":
            self.metrics.bytes_moved["host->disk"] += len(data)
        if victim is not None:
            self.dropped(victim)

    def _unput(self, pid: int, to: str) -> None:
        if to == "host":
            self.storage.host.remove(pid)
        elif self.storage.disk is not None:
            self.storage.disk.remove(pid)

    def spill(self, pid: int, protect: frozenset[int] | set[int] = frozenset()) -> None:
        """Move a host page to disk: its file is written before anything is dropped for room."""
        with self.holding(pid, protect):
            self._spill(pid, protect)

    def _spill(self, pid: int, protect: frozenset[int] | set[int], checked: bool = False) -> None:
        """The move of ``spill`` (``pid`` and ``protect`` held; ``checked``: the spec allows it now)."""
        disk = self.storage.disk
        assert disk is not None
        rec = self.pages.get(pid)
        data = self.storage.host.get(pid)
        if data is None or rec.checksum is None:
            raise TierError(f"page {pid} has no host copy to spill")
        pipe = self.pipe
        if not checked and not pipe.allowed("spill", None, pid):
            pipe.fire("spill", None, pid)
        victim = self._disk_victim(set(protect) | {pid})
        disk.put(pid, data, rec.checksum, over=victim is not None)
        sp = pipe.begin()
        try:
            if victim is not None:
                pipe.fire("drop", None, victim)
            pipe.fire("spill", None, pid)
        except BaseException:
            pipe.rollback(sp)
            disk.remove(pid)
            raise
        pipe.commit()
        self.storage.host.remove(pid)
        self.seam.moved(rec, "disk")
        self.metrics.bytes_moved["host->disk"] += len(data)
        if victim is not None:
            self.dropped(victim)

    def _disk_victim(self, protect: set[int]) -> int | None:
        disk = self.storage.disk
        assert disk is not None
        if not disk.full:
            return None
        victim = self.seam.choose("disk", ("drop",), protect)
        if victim is None:
            raise CapacityError(f"disk tier full ({disk.capacity} pages), nothing can leave it")
        return victim

    def _room_host(self, protect: set[int]) -> None:
        """Room for one more host page (the caller holds ``protect``): the policy's victims spilled (or
        else dropped), each in its own move."""
        host, disk = self.storage.host, self.storage.disk
        while host.full:
            events = ("spill", "drop") if disk is not None else ("drop",)
            victim = self.seam.choose("host", events, protect)
            if victim is None:
                raise CapacityError(f"host tier full ({host.capacity} pages), nothing can leave it")
            if disk is not None and self.pipe.allowed("spill", None, victim):
                self.hold_one(victim)
                try:
                    self._spill(victim, protect, checked=True)
                finally:
                    self.release_held((victim,))
            else:
                self.drop(victim)

    # -- drop and evict ---------------------------------------------------------------------------
    def drop(self, pid: int) -> None:
        """Forget a page's payload (spec ``drop``); collect the page if nothing holds it."""
        self.pipe.fire("drop", None, pid)
        self.dropped(pid)

    def dropped(self, pid: int) -> None:
        """After ``drop`` fired on ``pid``: free its payload and collect it if nothing holds it."""
        rec = self.pages.get(pid)
        self.storage.release(rec)
        self.seam.moved(rec, "dropped")
        self.collector.collect(pid)

    def evict(self, pid: int) -> None:
        """Take a page out of the reuse pool; collect it if nothing else holds it."""
        self.pipe.fire("evict", None, pid)
        self.collector.collect(pid)

    # -- recompute --------------------------------------------------------------------------------
    def recompute(self, pid: int, protect: frozenset[int] | set[int] = frozenset(), *, held: bool = False) -> None:
        """Rebuild a dropped page from its tokens into a fresh slot (``held``: the caller holds ``protect``)."""
        if held and pid in protect:  # the caller holds the page itself: nothing to hold, a move's sweep only
            self.sweep()
            return self._recompute(pid, protect)
        with self.holding(pid, frozenset() if held else protect):
            self._recompute(pid, protect)

    def _recompute(self, pid: int, protect: frozenset[int] | set[int]) -> None:
        rec = self.pages.get(pid)
        pipe = self.pipe
        slots = self.storage.slots  # with a free slot the firing decides (a refusal gives the slot back)
        if not slots.free_slots and not pipe.allowed("recompute", None, pid):  # refused before room is made
            pipe.fire("recompute", None, pid)
        slot = slots.take(pid) if slots.free_slots else self.take_slot(rec, protect)
        try:
            pipe.fire("recompute", None, pid)
        except BaseException:
            self.storage.slots.give(slot)
            raise
        self.storage.place(rec, slot, pipe.store.page("gen", pid))
        self.storage.data.recompute(slot, rec.depth, rec.token_ids)
        self.seam.moved(rec, "gpu")
        self.metrics.extra["recomputed_pages"] += 1

    def close(self) -> None:
        """Try the leftover files once more and release the disk directory (after the copy workers
        stopped)."""
        self.sweep()
        if self.storage.disk is not None:
            self.storage.disk.close()
