"""Disk faults for the soak: damaged page files, unwritable directories, full disks, and the ledger
that tells which damage a read of the runtime actually met.

The runtime's disk tier is swapped for ``FaultyDisk`` (same files, same code), which remembers the
payload each page file was last written with (the *truth*) and compares every read against it::

    put(pid, data)   ->  truth[pid] = data           (a write refused by a fault raises TierError)
    get(pid)         ->  bytes found; != truth[pid]  => a fault *reached* a read
    corrupt_pages    ->  the runtime's own count of faults it *detected* (verify refused the copy)

    every fault reached must be detected:   reached == sum(metrics().corrupt_pages)

File damage (bit flip in the payload, truncation, deletion) is done to the real files, under the
manager's lock so no write races it.  An unwritable directory is a real ``chmod`` when the process is
not root; as root (where permissions do not bind) the tier refuses writes and deletions itself, with
the messages the operating system would give.  A full disk refuses writes with ENOSPC.
"""

from __future__ import annotations

import errno
import os
import random
import stat
import threading
import time
from collections import Counter
from pathlib import Path

from morphcache.runtime import CacheManager, TierError
from morphcache.runtime.tiers import DiskTier

HEADER_BYTES = 24  # b"MCPAGE01" | u64 length | u64 checksum: damage goes after it
FILE_FAULTS = ("bitflip", "truncate", "delete")
WRITE_FAULTS = ("readonly", "nospace")


class FaultyDisk(DiskTier):
    """The runtime's disk tier with a ledger of what each file should hold and switchable write
    faults.  Installed on a live manager by ``install`` (the tier object keeps its state)."""

    truth: dict[int, bytes]
    reads: Counter[str]
    write_fault: str | None
    real_chmod: bool
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
        disk.real_chmod = os.geteuid() != 0
        disk.ledger_lock = threading.Lock()
        disk.read_delay = 0.002
        assert isinstance(disk, FaultyDisk)
        return disk

    def put(self, pid: int, data: bytes, check: int, *, over: bool = False) -> None:
        """Write the page file (refused while a write fault is on), then record it as the truth."""
        fault = self.write_fault
        if fault == "nospace" or (fault == "readonly" and not self.real_chmod):
            if pid not in self.pages and len(self.pages) >= self.capacity + (1 if over else 0):
                super().put(pid, data, check, over=over)  # the tier's own CapacityError comes first
            code = errno.ENOSPC if fault == "nospace" else errno.EROFS
            with self.ledger_lock:
                self.reads["writes_refused"] += 1
            raise TierError(f"cannot write page {pid} to {str(self.path(pid))!r}: {os.strerror(code)}")
        try:
            super().put(pid, data, check, over=over)
        except TierError:
            with self.ledger_lock:
                self.reads["writes_refused"] += 1
            raise
        with self.ledger_lock:
            self.truth[pid] = data

    def get(self, pid: int) -> bytes | None:
        """Read the page file; count the read as a fault reached when it differs from the truth."""
        time.sleep(self.read_delay)  # a slow disk: copies stay in flight a while
        data = super().get(pid)
        with self.ledger_lock:
            want = self.truth.get(pid)
            self.reads["reads"] += 1
            if data != want:
                self.reads["faults_reached"] += 1
        return data

    def remove(self, pid: int) -> bool:
        """Delete the page file (a read-only directory keeps it: a counted leftover)."""
        with self.ledger_lock:
            self.truth.pop(pid, None)
        if self.write_fault == "readonly" and not self.real_chmod:
            self.pages.discard(pid)
            self.leftovers.add(self.path(pid))
            return False
        return super().remove(pid)

    def sweep(self) -> int:
        """Retry the leftovers (none can go while the directory is read-only)."""
        if self.write_fault == "readonly" and not self.real_chmod:
            return len(self.leftovers)
        return super().sweep()


class FaultInjector:
    """Injects disk faults into one manager's disk tier and counts them by kind."""

    def __init__(self, m: CacheManager, rng: random.Random) -> None:
        self.m = m
        self.disk = FaultyDisk.install(m)
        self.rng = rng
        self.injected: Counter[str] = Counter()
        self._mode = 0

    def damage_file(self) -> str | None:
        """Flip a payload bit of, truncate or delete one page file on disk; the kind, or None when no
        page is on disk."""
        m, disk, rng = self.m, self.disk, self.rng
        with m.lock:
            pids = sorted(disk.pages)
            if not pids:
                return None
            pid = rng.choice(pids)
            path = disk.path(pid)
            kind = rng.choice(FILE_FAULTS)
            try:
                raw = path.read_bytes()
                if not raw:
                    return None  # truncated to nothing already
                if kind == "bitflip":
                    if len(raw) <= HEADER_BYTES:
                        return None
                    pos = rng.randrange(HEADER_BYTES, len(raw))
                    flipped = bytearray(raw)
                    flipped[pos] ^= 1 << rng.randrange(8)
                    path.write_bytes(bytes(flipped))
                elif kind == "truncate":
                    with path.open("r+b") as f:
                        f.truncate(rng.randrange(len(raw)))
                else:
                    path.unlink()
            except OSError:
                return None  # already gone (a previous fault)
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
        disk = self.disk
        if disk.real_chmod:
            if kind == "readonly":
                self._mode = stat.S_IMODE(os.stat(disk.dir).st_mode)
                os.chmod(disk.dir, 0o555)
            elif disk.write_fault == "readonly":
                os.chmod(disk.dir, self._mode)
        disk.write_fault = kind

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


def leftover_files(directory: Path) -> list[str]:
    """Page files and temporary files in ``directory`` (for a check after close)."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(("page-", ".page-")))
