"""The disk tier: every page's payload a checksummed record in one slab file, at its slot's offset.

The directory holds the slab and the lock that keeps a second manager out of it::

    pages.slab   slot 0          slot 1          slot 2 ...      (stride: a record, 64-byte rounded)
                 [hdr|payload ]  [hdr|payload ]  [0000|stale  ]  <- slot 2 free: its record cleared
    hdr  =  b"MCSLAB01" | u64 page id | u64 length | u64 checksum       (HEADER.size = 32 bytes)
    .lock        flock'ed for the tier's lifetime

    put     a free slot -> one positional write (header + payload) -> fdatasync -> the page's slot
    get     one positional read of the page's slot
    remove  one positional write that clears the record's magic -> the slot is free again

Nothing is created, renamed or deleted a page.  A write goes to a free slot, never over the page's
previous record, and the page's slot changes only once the write (and its sync) succeeded: a failed
write leaves the page where it was and its previous copy whole.  A read returns None where the slot
holds no record of this page (cleared, foreign, past the end of a truncated slab) and the bytes it
found otherwise (possibly short or flipped): the caller compares the checksum with the one the
control plane recorded when the page left the GPU, never the record's own claim alone.  A removed
page's record that cannot be cleared (a read-only file system) keeps its slot out of use, is kept in
``leftovers``, counted, and cleared on a later ``sweep``.

``locate(pid)`` says where a page's payload lies (path, offset, length), for tools that damage it.
"""

from __future__ import annotations

import fcntl
import heapq
import os
import struct
from contextlib import suppress
from pathlib import Path

from .errors import CapacityError, TierError

MAGIC = b"MCSLAB01"
HEADER = struct.Struct("<8sQQQ")  # magic | page id | payload length | checksum
SLAB = "pages.slab"
_CLEAR = bytes(len(MAGIC))  # written over a record's magic: the slot holds no page
RUN_BYTES = 1 << 20  # the most one write clearing a run of adjacent records covers


def _runs(slots: list[int]) -> list[tuple[int, int]]:
    """The runs of adjacent slots in ascending ``slots``, as ``(start, end)`` positions in it."""
    runs, start = [], 0
    for i in range(1, len(slots)):
        if slots[i] != slots[i - 1] + 1:
            runs.append((start, i))
            start = i
    runs.append((start, len(slots)))
    return runs


class DiskTier:
    """Payloads as checksummed records in one slab file under ``directory``, at most ``capacity``
    pages of ``page_bytes`` bytes (a longer payload is refused)."""

    name = "disk"

    def __init__(self, directory: str | os.PathLike[str], capacity: int, page_bytes: int) -> None:
        self.capacity = capacity
        self.dir = Path(directory)
        self.slab = self.dir / SLAB
        self.stride = -(-(HEADER.size + page_bytes) // 64) * 64  # whole cache lines
        self.pages: dict[int, int] = {}  # page id -> slot holding its record
        self.leftovers: dict[int, int] = {}  # slot -> page id: records of gone pages not yet cleared
        self.free_slots: list[int] = []  # a heap: the lowest slot given back is taken first (a compact slab)
        self.end = 0  # slots 0..end-1 have been used
        self._lock = self._fd = -1
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._lock = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise TierError(f"disk tier directory {str(self.dir)!r} is not writable: "
                            f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock)
            self._lock = -1
            raise TierError(f"disk tier directory {str(self.dir)!r} is in use by another cache manager "
                            "(its slab would be shared)") from None
        try:  # a previous manager's records mean nothing to this one: the slab starts empty
            self._fd = os.open(self.slab, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            self.close()
            raise TierError(f"disk tier directory {str(self.dir)!r} is not writable: "
                            f"{exc.strerror or exc}") from None

    def close(self) -> None:
        """Let another manager use the directory."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def __del__(self) -> None:
        self.close()

    def __contains__(self, pid: object) -> bool:
        return pid in self.pages

    def __len__(self) -> int:
        return len(self.pages)

    @property
    def full(self) -> bool:
        """No room for another page."""
        return len(self.pages) >= self.capacity

    def locate(self, pid: int) -> tuple[Path, int, int]:
        """Where page ``pid``'s payload lies: the slab, the payload's offset in it and the length the
        record claims (KeyError if the page is not on disk)."""
        off = self.pages[pid] * self.stride
        raw = os.pread(self._fd, HEADER.size, off)
        length = HEADER.unpack(raw)[2] if len(raw) == HEADER.size else 0
        return self.slab, off + HEADER.size, length

    def pwrite(self, data: bytes | bytearray, offset: int) -> None:
        """Write ``data`` at ``offset`` of the slab, all of it (OSError if the system refuses)."""
        done = os.pwrite(self._fd, data, offset)
        while done < len(data):  # a short write: the rest
            done += os.pwrite(self._fd, memoryview(data)[done:], offset + done)

    def put(self, pid: int, data: bytes, check: int, *, over: bool = False) -> None:
        """Write the page's record into a free slot, synced, then make it the page's.  ``over``: the
        caller frees a page right after (a spill writes before it drops its victim)."""
        if pid not in self.pages and len(self.pages) >= self.capacity + (1 if over else 0):
            raise CapacityError(f"disk tier full ({self.capacity} pages)")
        if HEADER.size + len(data) > self.stride:
            raise TierError(f"cannot write page {pid}: {len(data)} bytes, the disk tier's slots hold "
                            f"{self.stride - HEADER.size}")
        if self.free_slots:
            slot = heapq.heappop(self.free_slots)
        else:
            slot, self.end = self.end, self.end + 1
        off = slot * self.stride
        try:
            self.pwrite(HEADER.pack(MAGIC, pid, len(data), check) + data, off)
            os.fdatasync(self._fd)
        except OSError as exc:
            self._discard(slot)
            raise TierError(f"cannot write page {pid} to {str(self.slab)!r}: {exc.strerror or exc}") from None
        old = self.pages.get(pid)
        self.pages[pid] = slot
        if old is not None:
            self._clear(old, pid)

    def put_many(self, pids: list[int], datas: list[bytes], checks: list[int]) -> None:
        """``put`` for each of ``pids`` in order, in the slots those puts would take, the records of
        adjacent slots written by one write (each padded to its slot) and one sync for them all::

            slots 4 5 6 9   ->   one write of 4..6's records, one of 9's, then one fdatasync

        All or nothing: when any write or the sync fails (TierError), or the disk has no room for them
        all (CapacityError), none of them is on disk and the slots are free again.  (Pages repeated or
        on disk already: ``put`` each in turn.)"""
        pages, n = self.pages, len(pids)
        if n < 2:  # one record: ``put`` is the same write and sync
            if n:
                self.put(pids[0], datas[0], checks[0])
            return
        if len(set(pids)) != n or not pages.keys().isdisjoint(pids):
            for pid, data, check in zip(pids, datas, checks, strict=True):
                self.put(pid, data, check)
            return
        if len(pages) + n > self.capacity:
            raise CapacityError(f"disk tier full ({self.capacity} pages)")
        stride, head = self.stride, HEADER.size
        lengths = list(map(len, datas))
        if max(lengths) > stride - head:
            j = next(j for j, length in enumerate(lengths) if head + length > stride)
            raise TierError(f"cannot write page {pids[j]}: {lengths[j]} bytes, the disk tier's slots hold "
                            f"{stride - head}")
        free = self.free_slots
        taken = min(len(free), n)
        slots = [heapq.heappop(free) for _ in range(taken)]
        if taken < n:
            slots += range(self.end, self.end + n - taken)
            self.end += n - taken
        pack = HEADER.pack
        records = [pack(MAGIC, pid, length, check) + data
                   for pid, length, check, data in zip(pids, lengths, checks, datas, strict=True)]
        # the slots ascend (the heap's lowest first, then new ones at the end): a run ends where the next
        # is not adjacent
        runs = [(0, n)] if slots[-1] - slots[0] == n - 1 else _runs(slots)
        same = lengths.count(lengths[0]) == n  # (one padding between every two records)
        upto = 0
        try:
            for start, end in runs:
                if same:
                    run = bytes(stride - head - lengths[0]).join(records[start:end])
                else:  # each record padded to its slot, the last one unpadded (as ``put`` writes it)
                    run = b"".join([records[j] + bytes(stride - head - lengths[j]) for j in range(start, end - 1)]
                                   + [records[end - 1]])
                self.pwrite(run, slots[start] * stride)
                upto = end
            os.fdatasync(self._fd)
        except OSError as exc:
            for slot in slots[:upto]:  # what reached the slab cleared, the slots free again
                self._discard(slot)
            for slot in slots[upto:]:
                heapq.heappush(free, slot)
            failed = pids[upto] if upto < n else pids[0]
            raise TierError(f"cannot write page {failed} to {str(self.slab)!r}: {exc.strerror or exc}") from None
        pages.update(zip(pids, slots, strict=True))

    def get(self, pid: int) -> bytes | None:
        """The payload bytes found in the page's slot, None if it holds no record of the page.

        A short or corrupted record yields whatever payload bytes it has (possibly fewer than it
        claims); the caller's checksum comparison rejects them.
        """
        slot = self.pages.get(pid)
        if slot is None:
            return None
        try:
            raw = os.pread(self._fd, self.stride, slot * self.stride)
        except OSError:
            return None
        if len(raw) < HEADER.size:
            return None
        magic, owner, length, _ = HEADER.unpack_from(raw)
        if magic != MAGIC or owner != pid:
            return None
        return raw[HEADER.size:HEADER.size + length]

    def remove(self, pid: int) -> bool:
        """Clear the page's record and free its slot (nothing to do if the page is not on disk); False
        if the record could not be cleared (its slot is then a leftover, retried by ``sweep``)."""
        slot = self.pages.pop(pid, None)
        return True if slot is None else self._clear(slot, pid)

    def remove_many(self, pids: list[int]) -> None:
        """``remove`` for each of ``pids`` in order, the records of adjacent slots cleared by one write
        (from the first one's magic to the last one's: the stale payloads between them zeroed too)::

            slots 4 5 6 9   ->   one write over 4..6's magics, one over 9's

        A run whose write fails is cleared again slot by slot, so exactly the slots whose own clearing
        fails become leftovers; the slots are freed (or kept as leftovers) in the order of ``pids``."""
        pop = self.pages.pop
        gone = [(slot, pid) for pid in pids if (slot := pop(pid, None)) is not None]
        if not gone:
            return
        stride, failed = self.stride, set()
        longest = max(1, RUN_BYTES // stride)
        ordered = sorted(slot for slot, _ in gone)
        start = 0
        for i in range(1, len(ordered) + 1):
            if i < len(ordered) and ordered[i] == ordered[i - 1] + 1 and i - start < longest:
                continue
            first, n = ordered[start], i - start
            try:
                self.pwrite(bytes((n - 1) * stride + len(_CLEAR)) if n > 1 else _CLEAR, first * stride)
            except OSError:
                for slot in ordered[start:i]:
                    try:
                        self.pwrite(_CLEAR, slot * stride)
                    except OSError:
                        failed.add(slot)
            start = i
        free, leftovers = self.free_slots, self.leftovers
        for slot, pid in gone:
            if slot in failed:
                leftovers[slot] = pid
            else:
                heapq.heappush(free, slot)

    def _clear(self, slot: int, pid: int) -> bool:
        """Clear the record in ``slot`` (written for ``pid``) and free the slot; a leftover if that fails."""
        try:
            self.pwrite(_CLEAR, slot * self.stride)
        except OSError:
            self.leftovers[slot] = pid
            return False
        heapq.heappush(self.free_slots, slot)
        return True

    def _discard(self, slot: int) -> None:
        """Free the slot of a failed write, clearing whatever part of the record reached it (a record
        there that cannot be cleared is never read: a page's record is read through its own slot)."""
        with suppress(OSError):
            self.pwrite(_CLEAR, slot * self.stride)
        heapq.heappush(self.free_slots, slot)

    def sweep(self) -> int:
        """Try again to clear the leftover records; returns how many are still left."""
        for slot, pid in list(self.leftovers.items()):
            del self.leftovers[slot]
            self._clear(slot, pid)
        return len(self.leftovers)
