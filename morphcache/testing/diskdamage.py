"""Damage one page's record in the disk tier's slab, as a failing disk would, and read what the slab
holds.  Each helper finds the page through ``disk.locate(pid)`` and writes the slab file directly
(never through the tier), so the tier meets the damage only when it reads the page::

    flip      payload bytes XOR'ed          -> the bytes read differ     (checksum)
    truncate  the record ends ``drop`` early -> fewer bytes read          (truncated)
    delete    the record's magic cleared    -> no record of the page     (missing)

``records`` scans the slab: the page id of every slot holding a whole-looking record.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from morphcache.runtime.disktier import HEADER, MAGIC, DiskTier

_LENGTH_AT = 16  # the length field's offset in a record's header


def _patch(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(data)


def payload(disk: DiskTier, pid: int) -> bytes:
    """The payload bytes page ``pid``'s record holds (as long as the record claims)."""
    path, off, length = disk.locate(pid)
    with path.open("rb") as f:
        f.seek(off)
        return f.read(length)


def flip(disk: DiskTier, pid: int, at: Iterable[int] = (-1,), mask: int = 1) -> None:
    """XOR ``mask`` into the payload bytes at positions ``at`` (negative: from the payload's end; a
    position past the payload the record claims is skipped)."""
    path, off, length = disk.locate(pid)
    raw = bytearray(payload(disk, pid))
    for i in at:
        if -len(raw) <= i < len(raw):
            raw[i] ^= mask
    _patch(path, off, bytes(raw[:length]))


def truncate(disk: DiskTier, pid: int, drop: int) -> None:
    """Make the record end ``drop`` bytes early (at least one, at most its whole payload)."""
    path, off, length = disk.locate(pid)
    keep = max(0, length - max(1, drop))
    _patch(path, off - HEADER.size + _LENGTH_AT, keep.to_bytes(8, "little"))


def delete(disk: DiskTier, pid: int) -> None:
    """Clear the record's magic: the slot holds no record of the page any more."""
    path, off, _ = disk.locate(pid)
    _patch(path, off - HEADER.size, bytes(len(MAGIC)))


def records(disk: DiskTier) -> dict[int, int]:
    """Slot -> page id for every slot of the slab that holds a record (its magic intact)."""
    out: dict[int, int] = {}
    size = os.path.getsize(disk.slab)
    with disk.slab.open("rb") as f:
        for slot in range(-(-size // disk.stride)):
            f.seek(slot * disk.stride)
            raw = f.read(HEADER.size)
            if len(raw) == HEADER.size and raw.startswith(MAGIC):
                out[slot] = HEADER.unpack(raw)[1]
    return out
