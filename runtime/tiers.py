"""Where payloads live off the GPU: the GPU slot pool, the host tier and the disk tier.

Each page's payload is in exactly one of them (its *home*, given by the page's tier state).  The
disk tier writes one file per page, atomically, with a header carrying the length and checksum::

    page-<id>.kv  =  b"MCPAGE01" | u64 length | u64 checksum | payload
    write:  tmp file in the same directory -> write -> fsync -> rename -> fsync(dir)

A read returns None for a missing file and the bytes it found otherwise (possibly truncated or
flipped): the caller compares the checksum with the one the control plane recorded when the page
left the GPU, never the file's own claim alone.  A file that cannot be deleted (a read-only
directory) is kept in ``leftovers``, counted, and deleted on a later ``sweep``.
"""

from __future__ import annotations

import fcntl
import os
import struct
import tempfile
import threading
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import CapacityError, TierError
from .store import PageStore

if TYPE_CHECKING:
    from .pages import PageRecord

_MAGIC = b"MCPAGE01"
_HEADER = struct.Struct("<8sQQ")


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

    def give(self, slot: int) -> None:
        """Return ``slot`` to the free list."""
        del self.owner[slot]
        self.free_slots.append(slot)

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


class DiskTier:
    """Payloads as checksummed files under ``directory``, at most ``capacity`` pages."""

    name = "disk"

    def __init__(self, directory: str | os.PathLike[str], capacity: int) -> None:
        self.capacity = capacity
        self.dir = Path(directory)
        self.pages: set[int] = set()
        self.leftovers: set[Path] = set()  # files of pages no longer on disk that could not be deleted
        self._lock = -1
        self._dfd = -1
        self._prefix = f"{self.dir}/page-"  # + "<id>.kv": a page's file, as a string (no Path object kept)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".probe-", dir=self.dir)
            os.close(fd)
            os.unlink(probe)
            self._lock = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise TierError(f"disk tier directory {str(self.dir)!r} is not writable: "
                            f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock)
            raise TierError(f"disk tier directory {str(self.dir)!r} is in use by another cache manager "
                            "(page files would collide)") from None

    def close(self) -> None:
        """Let another manager use the directory."""
        if self._dfd >= 0:
            os.close(self._dfd)
            self._dfd = -1
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

    def path(self, pid: int) -> Path:
        """The file of page ``pid``."""
        return Path(self._file(pid))

    def _file(self, pid: int) -> str:  # the file of page ``pid`` as a string (what reads and writes open)
        return f"{self._prefix}{pid}.kv"

    def _dir_fd(self) -> int:
        """The directory, open for the fsync that makes a rename durable (opened once)."""
        if self._dfd < 0:
            self._dfd = os.open(self.dir, os.O_RDONLY)
        return self._dfd

    def put(self, pid: int, data: bytes, check: int, *, over: bool = False) -> None:
        """Write the page file atomically (tmp + fsync + rename + fsync of the directory).  ``over``:
        the caller frees a page right after (a spill writes before it drops its victim)."""
        if pid not in self.pages and len(self.pages) >= self.capacity + (1 if over else 0):
            raise CapacityError(f"disk tier full ({self.capacity} pages)")
        target = self._file(pid)
        try:
            fd, tmp = self.temp_file(pid)
            try:
                try:
                    body = memoryview(_HEADER.pack(_MAGIC, len(data), check) + data)
                    while body:  # a short write: the rest
                        body = body[os.write(fd, body):]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, target)
            except BaseException:
                with suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            os.fsync(self._dir_fd())
        except OSError as exc:
            raise TierError(f"cannot write page {pid} to {target!r}: {exc.strerror or exc}") from None
        self.pages.add(pid)

    def temp_file(self, pid: int) -> tuple[int, str]:
        """A new empty file beside the page's, open for writing: its descriptor and path.  The directory
        is this manager's alone (locked), so one name per page is enough; a stale one (an interrupted
        write) is replaced."""
        tmp = f"{self.dir}/.page-{pid}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), tmp
        except FileExistsError:
            os.unlink(tmp)
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), tmp

    def get(self, pid: int) -> bytes | None:
        """The payload bytes found in the file (header stripped), None if the file is missing.

        A short, corrupted or foreign file yields whatever bytes follow the header (possibly empty);
        the caller's checksum comparison rejects them.
        """
        try:
            with open(self._file(pid), "rb") as f:
                raw = f.read()
        except OSError:
            return None
        if len(raw) < _HEADER.size:
            return b""
        magic, length, _ = _HEADER.unpack_from(raw)
        body = raw[_HEADER.size:]
        if magic != _MAGIC or len(body) != length:
            return body[:0] if magic != _MAGIC else body
        return body

    def remove(self, pid: int) -> bool:
        """Delete the page file (no error if it is already gone); False if it could not be deleted (it
        is then a leftover, retried by ``sweep``)."""
        self.pages.discard(pid)
        if self.leftovers:
            self.leftovers.discard(self.path(pid))
        try:
            os.unlink(self._file(pid))  # the string: a Path object costs as much again as the unlink
        except FileNotFoundError:
            pass
        except OSError:
            self.leftovers.add(self.path(pid))
            return False
        return True

    def sweep(self) -> int:
        """Try again to delete leftover files (skipping any that became a page's file again); returns how
        many are still left."""
        live = {self.path(pid) for pid in self.pages}
        for path in list(self.leftovers):
            if path in live:
                self.leftovers.discard(path)
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            self.leftovers.discard(path)
        return len(self.leftovers)


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

    def release(self, rec: PageRecord) -> None:
        """Free the page's payload wherever it is."""
        self.free_slot(rec)
        self.host.remove(rec.pid)
        if self.disk is not None and rec.pid in self.disk:
            self.disk.remove(rec.pid)

    def where(self, pid: int, slot: int) -> list[str]:
        """The stores holding a payload of ``pid`` (GPU when ``slot`` >= 0)."""
        out = ["gpu"] if slot >= 0 else []
        if pid in self.host:
            out.append("host")
        if self.disk is not None and pid in self.disk:
            out.append("disk")
        return out
