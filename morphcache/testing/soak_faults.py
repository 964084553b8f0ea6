"""Disk faults for the soak: damaged page records, an unwritable or full disk, and the ledger that
tells which damage a read of the runtime actually met.

The runtime's disk tier is swapped for ``FaultyDisk`` (same slab, same code), which remembers the
payload each page record was last written with (the *truth*) and compares every read against it::

    put(pid, data)   ->  truth[pid] = data           (a write refused by a fault raises TierError)
    get(pid)         ->  bytes found; != truth[pid]  => a fault *reached* a read
    corrupt_pages    ->  the runtime's own count of faults it *detected* (verify refused the copy)

    every fault reached must be detected:   reached == sum(metrics().corrupt_pages)

Record damage (bit flip in the payload, truncation, deletion: ``diskdamage``) is done to the real
slab, under the manager's lock so no write races it.  A read-only or full file system is refused at
the tier's one positional write, with the errors the operating system gives (a directory's
permissions would not reach the slab the tier holds open): read-only refuses every write, so a
removed page's record cannot be cleared (a counted leftover); a full disk refuses new records only.
"""

from __future__ import annotations

import errno
import os
import random
import threading
import time
from collections import Counter

from morphcache.runtime import CacheManager, TierError
from morphcache.runtime.disktier import MAGIC, DiskTier

from . import diskdamage

FILE_FAULTS = ("bitflip", "truncate", "delete")
WRITE_FAULTS = ("readonly", "nospace")


class FaultyDisk(DiskTier):
    """The runtime's disk tier with a ledger of what each record should hold and switchable write
    faults.  Installed on a live manager by ``install`` (the tier object keeps its state)."""

    truth: dict[int, bytes]
    reads: Counter[str]
    write_fault: str | None
    ledger_lock: threading.Lock
    read_delay: float

    @classmethod
    def install(cls, m: CacheManager) -> FaultyDisk:
        """Turn ``m``'s disk tier into a FaultyDisk (it must have one)."""
        disk = m.disk
        if disk is None:
            raise ValueError("the manager has no disk tier")
        disk.__class__ = cls
        disk.truth = {}
        disk.reads = Counter()
        disk.write_fault = None
        disk.ledger_lock = threading.Lock()
        disk.read_delay = 0.002
        assert isinstance(disk, FaultyDisk)
        return disk

    def pwrite(self, data: bytes | bytearray, offset: int) -> None:
        """The slab write, refused while a write fault covers it."""
        fault = self.write_fault
        if fault == "readonly" or (fault == "nospace" and data.startswith(MAGIC)):
            code = errno.EROFS if fault == "readonly" else errno.ENOSPC
            raise OSError(code, os.strerror(code))
        super().pwrite(data, offset)

    def put(self, pid: int, data: bytes, check: int, *, over: bool = False) -> None:
        """Write the page record (refused while a write fault is on), then record it as the truth."""
        try:
            super().put(pid, data, check, over=over)
        except TierError:
            with self.ledger_lock:
                self.reads["writes_refused"] += 1
            raise
        with self.ledger_lock:
            self.truth[pid] = data

    def put_many(self, pids: list[int], datas: list[bytes], checks: list[int]) -> None:
        """Write the page records together (refused while a write fault is on), then record them as the
        truth."""
        try:
            super().put_many(pids, datas, checks)
        except TierError:
            with self.ledger_lock:
                self.reads["writes_refused"] += 1
            raise
        with self.ledger_lock:
            self.truth.update(zip(pids, datas, strict=True))

    def get(self, pid: int) -> bytes | None:
        """Read the page record; count the read as a fault reached when it differs from the truth."""
        time.sleep(self.read_delay)  # a slow disk: copies stay in flight a while
        data = super().get(pid)
        with self.ledger_lock:
            want = self.truth.get(pid)
            self.reads["reads"] += 1
            if data != want:
                self.reads["faults_reached"] += 1
        return data

    def remove(self, pid: int) -> bool:
        """Clear the page record (a read-only disk keeps it: a counted leftover)."""
        with self.ledger_lock:
            self.truth.pop(pid, None)
        return super().remove(pid)


class FaultInjector:
    """Injects disk faults into one manager's disk tier and counts them by kind."""

    def __init__(self, m: CacheManager, rng: random.Random) -> None:
        self.m = m
        self.disk = FaultyDisk.install(m)
        self.rng = rng
        self.injected: Counter[str] = Counter()

    def damage_file(self) -> str | None:
        """Flip a payload bit of, truncate or delete one page record on disk; the kind, or None when no
        page is on disk (or the record has no payload left to damage)."""
        m, disk, rng = self.m, self.disk, self.rng
        with m.lock:
            pids = sorted(disk.pages)
            if not pids:
                return None
            pid = rng.choice(pids)
            kind = rng.choice(FILE_FAULTS)
            _, _, length = disk.locate(pid)
            if length == 0 and kind != "delete":
                return None  # truncated to nothing already
            if kind == "bitflip":
                diskdamage.flip(disk, pid, (rng.randrange(length),), 1 << rng.randrange(8))
            elif kind == "truncate":
                diskdamage.truncate(disk, pid, length - rng.randrange(length))
            else:
                diskdamage.delete(disk, pid)
            self.injected[kind] += 1
            return kind

    def toggle_writes(self) -> str | None:
        """Switch a write fault on (read-only directory or full disk) or, when one is on, off again."""
        m, disk = self.m, self.disk
        with m.lock:
            if disk.write_fault is not None:
                self._set(None)
                return None
            kind = self.rng.choice(WRITE_FAULTS)
            self._set(kind)
            self.injected[kind] += 1
            return kind

    def _set(self, kind: str | None) -> None:
        self.disk.write_fault = kind

    def heal(self) -> None:
        """Lift any write fault (the end of a run)."""
        with self.m.lock:
            if self.disk.write_fault is not None:
                self._set(None)

    @property
    def faults_reached(self) -> int:
        """Reads of a page file that met damage."""
        return self.disk.reads["faults_reached"]

    @property
    def writes_refused(self) -> int:
        """Writes a write fault refused."""
        return self.disk.reads["writes_refused"]


def stray_records(disk: DiskTier) -> list[int]:
    """Slots of the slab holding a record that is neither its page's nor a counted leftover."""
    live = {slot: pid for pid, slot in disk.pages.items()} | disk.leftovers
    return sorted(slot for slot, pid in diskdamage.records(disk).items() if live.get(slot) != pid)
