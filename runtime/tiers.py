"""Where payloads live off the GPU: the GPU slot pool, the host tier and the disk tier.

Each page's payload is in exactly one of them (its *home*, given by the page's tier state).  The
disk tier (disktier.py) keeps each page as a checksummed record in one slab file; a read returns
the bytes found, and the caller compares them with the checksum the control plane recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .disktier import DiskTier
from .errors import CapacityError
from .store import PageStore

if TYPE_CHECKING:
    from .pages import PageRecord

FEW = 6  # a data plane's slots freed one by one up to this many (its ``free_many`` has a fixed cost)


class SlotPool:
    """GPU page slots ``0..n-1`` handed out from a free list."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.free_slots = list(range(slots - 1, -1, -1))
        self.owner: dict[int, int] = {}  # slot -> page id

    @property
    def used(self) -> int:
        """Slots currently holding a page."""
        return len(self.owner)

    def take(self, pid: int) -> int:
        """A free slot for page ``pid``; CapacityError if none is free."""
        if not self.free_slots:
            raise CapacityError(f"GPU pool full: all {self.slots} slots hold pages")
        slot = self.free_slots.pop()
        self.owner[slot] = pid
        return slot

    def take_many(self, pids: Sequence[int]) -> list[int]:
        """``take`` for each of ``pids`` in order (the slots those takes hand out); CapacityError, nothing
        taken, if fewer are free."""
        n, free = len(pids), self.free_slots
        if n > len(free):
            raise CapacityError(f"GPU pool full: {len(free)} of {self.slots} slots free, {n} asked for")
        if not n:
            return []
        slots = free[:-n - 1:-1]  # the free list's end, popped in turn
        del free[-n:]
        self.owner.update(zip(slots, pids, strict=True))
        return slots

    def give(self, slot: int) -> None:
        """Return ``slot`` to the free list."""
        del self.owner[slot]
        self.free_slots.append(slot)

    def give_many(self, slots: list[int]) -> None:
        """``give`` for each of ``slots``, in order."""
        owner = self.owner
        for slot in slots:
            del owner[slot]
        self.free_slots.extend(slots)

    def behind(self, n: int) -> None:
        """The last ``n`` slots given back are taken after the others, the first given first (as when
        each is given back just before it is taken)."""
        if n:
            free = self.free_slots
            free[:] = free[:-n - 1:-1] + free[:-n]


class HostTier:
    """Payloads in host memory, keyed by page id, at most ``capacity`` pages."""

    name = "host"

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.data: dict[int, bytes] = {}
        self._lock = threading.Lock()

    def __contains__(self, pid: object) -> bool:
        return pid in self.data

    def __len__(self) -> int:
        return len(self.data)

    @property
    def full(self) -> bool:
        """No room for another page."""
        return len(self.data) >= self.capacity

    def put(self, pid: int, data: bytes) -> None:
        """Store a payload."""
        if pid not in self.data and self.full:
            raise CapacityError(f"host tier full ({self.capacity} pages)")
        with self._lock:
            self.data[pid] = data

    def get(self, pid: int) -> bytes | None:
        """The stored payload, None if absent."""
        with self._lock:
            return self.data.get(pid)

    def remove(self, pid: int) -> None:
        """Forget the payload (no error if absent)."""
        if pid in self.data:
            with self._lock:
                self.data.pop(pid, None)

    def get_many(self, pids: Sequence[int]) -> list[bytes | None]:
        """``get`` for each of ``pids``."""
        get = self.data.get
        with self._lock:
            return [get(pid) for pid in pids]

    def put_many(self, pids: Sequence[int], datas: Sequence[bytes]) -> None:
        """``put`` each payload (distinct pages), all or none."""
        data = self.data
        if len(data) + len(pids) > self.capacity and \
                len(data) + sum(1 for pid in pids if pid not in data) > self.capacity:
            raise CapacityError(f"host tier full ({self.capacity} pages)")
        with self._lock:
            data.update(zip(pids, datas, strict=True))

    def remove_many(self, pids: Sequence[int]) -> None:
        """``remove`` each of ``pids`` (no lock taken when none of them is here: pages forgotten from disk)."""
        if pids and not self.data.keys().isdisjoint(pids):
            pop = self.data.pop
            with self._lock:
                for pid in pids:
                    pop(pid, None)


class Storage:
    """Where every page's payload is: the GPU slots (with the data plane behind them), host and disk."""

    def __init__(self, slots: SlotPool, data: PageStore, host: HostTier, disk: DiskTier | None) -> None:
        self.slots = slots
        self.data = data
        self.host = host
        self.disk = disk

    def place(self, rec: PageRecord, slot: int, gen: int) -> None:
        """The page now occupies GPU ``slot`` (taken for it); publish its generation there."""
        rec.gpu_slot = slot
        self.data.set_generation(slot, gen)

    def free_slot(self, rec: PageRecord) -> None:
        """Give the page's GPU slot back (its bytes there are gone)."""
        if rec.gpu_slot >= 0:
            self.data.free(rec.gpu_slot)
            self.slots.give(rec.gpu_slot)
            rec.gpu_slot = -1

    def free_slots(self, recs: Sequence[PageRecord]) -> None:
        """``free_slot`` for each of ``recs`` (distinct pages, each on the GPU), in order: the data plane's
        slots freed at once where it can (``free_many``; a few one by one), given back in that order."""
        slots = [rec.gpu_slot for rec in recs]
        many = getattr(self.data, "free_many", None) if len(slots) > FEW else None
        if many is not None:
            many(slots)
        else:
            free = self.data.free
            for slot in slots:
                free(slot)
        self.slots.give_many(slots)
        for rec in recs:
            rec.gpu_slot = -1

    def read_many(self, recs: Sequence[PageRecord]) -> list[bytes]:
        """The payloads of ``recs`` (each on the GPU), in order: the data plane's ``read_many`` of their
        slots where it has one, else its ``read`` of each slot."""
        many = getattr(self.data, "read_many", None)
        if many is not None:
            return many([rec.gpu_slot for rec in recs])  # type: ignore[no-any-return]
        read = self.data.read
        return [read(rec.gpu_slot) for rec in recs]

    def release(self, rec: PageRecord) -> None:
        """Free the page's payload wherever it is."""
        self.free_slot(rec)
        self.host.remove(rec.pid)
        if self.disk is not None and rec.pid in self.disk:
            self.disk.remove(rec.pid)

    def release_many(self, recs: list[PageRecord]) -> None:
        """``release`` for each of ``recs`` in order, the disk records cleared together
        (``DiskTier.remove_many``)."""
        self.free_slots([rec for rec in recs if rec.gpu_slot >= 0])
        pids = [rec.pid for rec in recs]
        self.host.remove_many(pids)
        if self.disk is not None:
            self.disk.remove_many(pids)

    def where(self, pid: int, slot: int) -> list[str]:
        """The stores holding a payload of ``pid`` (GPU when ``slot`` >= 0)."""
        out = ["gpu"] if slot >= 0 else []
        if pid in self.host:
            out.append("host")
        if self.disk is not None and pid in self.disk:
            out.append("disk")
        return out
