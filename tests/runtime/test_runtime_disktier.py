"""The disk tier's slab on its own: records in slots reused lowest first, a write that fails keeps the
previous copy, damage is seen by a read, records that cannot be cleared are leftovers, one manager a
directory."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from morphcache.runtime import CapacityError, TierError
from morphcache.runtime import disktier as disktier_module
from morphcache.runtime.disktier import DiskTier
from morphcache.testing import diskdamage
from morphcache.testing.diskdamage import records

PAGE = 40


def payload(i: int) -> bytes:
    return bytes((i * 7 + j) % 251 for j in range(PAGE))


def test_records_live_in_slots_reused_lowest_first(tmp_path: Path) -> None:
    disk = DiskTier(tmp_path, 4, PAGE)
    for pid in (10, 11, 12):
        disk.put(pid, payload(pid), pid)
    assert records(disk) == {0: 10, 1: 11, 2: 12} and disk.get(11) == payload(11)
    assert disk.remove(11) and disk.get(11) is None and records(disk) == {0: 10, 2: 12}
    disk.remove(10)
    disk.put(13, payload(13), 13)  # the lowest free slot
    assert records(disk) == {0: 13, 2: 12} and disk.get(13) == payload(13) and disk.get(12) == payload(12)
    assert disk.remove(99) and len(disk) == 2
    disk.close()


def test_a_failed_rewrite_keeps_the_previous_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = DiskTier(tmp_path, 2, PAGE)
    disk.put(1, payload(1), 1)

    def fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(disktier_module.os, "fdatasync", fdatasync)
    with pytest.raises(TierError, match="Input/output"):
        disk.put(1, payload(2), 2)
    assert disk.get(1) == payload(1) and records(disk) == {0: 1}  # the half-written record cleared
    monkeypatch.undo()
    disk.put(1, payload(3), 3)
    assert disk.get(1) == payload(3) and list(records(disk).values()) == [1]
    with pytest.raises(TierError, match="slots hold"):
        disk.put(2, bytes(disk.stride), 0)
    assert 2 not in disk
    disk.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_damage_to_one_record_is_what_its_read_finds(tmp_path: Path, damage: str) -> None:
    disk = DiskTier(tmp_path, 4, PAGE)
    for pid in (1, 2, 3):
        disk.put(pid, payload(pid), pid)
    if damage == "flip":
        diskdamage.flip(disk, 2, (0, -1), 0x80)
        found = disk.get(2)
        assert found is not None and len(found) == PAGE and found != payload(2)
    elif damage == "truncate":
        diskdamage.truncate(disk, 2, 5)
        assert disk.get(2) == payload(2)[:-5]
    else:
        diskdamage.delete(disk, 2)
        assert disk.get(2) is None
    assert disk.get(1) == payload(1) and disk.get(3) == payload(3)  # the neighbours are whole
    disk.close()


def test_a_record_that_cannot_be_cleared_is_a_leftover_until_a_sweep(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = DiskTier(tmp_path, 2, PAGE)
    disk.put(1, payload(1), 1)

    def pwrite(*args: Any) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(disktier_module.os, "pwrite", pwrite)
    assert not disk.remove(1) and 1 not in disk and disk.leftovers == {0: 1}
    assert disk.sweep() == 1 and records(disk) == {0: 1}
    monkeypatch.undo()
    disk.put(2, payload(2), 2)  # a leftover's slot is not reused
    assert records(disk) == {0: 1, 1: 2}
    assert disk.sweep() == 0 and records(disk) == {1: 2}
    disk.close()


def test_one_manager_a_directory_and_a_fresh_slab_each(tmp_path: Path) -> None:
    disk = DiskTier(tmp_path, 2, PAGE)
    disk.put(1, payload(1), 1)
    with pytest.raises(TierError, match="in use by another cache manager"):
        DiskTier(tmp_path, 2, PAGE)
    disk.close()
    again = DiskTier(tmp_path, 2, PAGE)
    assert records(again) == {} and len(again) == 0 and sorted(os.listdir(tmp_path)) == [".lock", "pages.slab"]
    again.close()


def test_short_writes_are_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = DiskTier(tmp_path, 2, PAGE)
    real_pwrite = os.pwrite
    monkeypatch.setattr(disktier_module.os, "pwrite", lambda fd, data, off: real_pwrite(fd, bytes(data)[:7], off))
    disk.put(1, payload(1), 1)
    assert disk.get(1) == payload(1) and disk.remove(1) and records(disk) == {}
    disk.close()


def _slab_with_holes(path: Path) -> DiskTier:
    """Slots 0..6 used, then 1, 2 and 5 freed: free slots 1 2 5, the next ones 7 8 ..."""
    disk = DiskTier(path, 12, PAGE)
    for pid in range(7):
        disk.put(pid, payload(pid), pid)
    disk.remove_many([1, 2, 5])
    return disk


def test_many_records_written_together_are_records_written_one_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``put_many`` takes the slots ``put`` would, one write a run of adjacent slots, one sync; every
    record reads back, the slab holds the same records."""
    together, alone = _slab_with_holes(tmp_path / "together"), _slab_with_holes(tmp_path / "alone")
    pids = [20, 21, 22, 23, 24]  # slots 1 2 | 5 | 7 8
    for pid in pids:
        alone.put(pid, payload(pid), pid)
    real_pwrite, real_sync = os.pwrite, os.fdatasync
    calls: list[tuple[int, int]] = []

    def pwrite(fd: int, data: Any, off: int) -> int:
        calls.append((off // together.stride, len(data)))
        return real_pwrite(fd, data, off)

    syncs: list[int] = []
    monkeypatch.setattr(disktier_module.os, "pwrite", pwrite)
    monkeypatch.setattr(disktier_module.os, "fdatasync", lambda fd: syncs.append(fd) or real_sync(fd))
    together.put_many(pids, [payload(pid) for pid in pids], pids)
    assert [slot for slot, _ in calls] == [1, 5, 7] and len(syncs) == 1
    assert records(together) == records(alone) == {**{s: s for s in (0, 3, 4, 6)}, 1: 20, 2: 21, 5: 22, 7: 23, 8: 24}
    assert together.pages == alone.pages and all(together.get(pid) == payload(pid) for pid in pids)
    assert together.get(3) == payload(3)  # a neighbour is whole
    for disk in (together, alone):
        disk.close()


@pytest.mark.parametrize("fail", ["second write", "sync"])
def test_many_records_written_together_all_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: str) -> None:
    """A write or the sync that fails leaves none of the pages on disk, no record of theirs in the slab,
    and their slots free for the next puts (taken as before)."""
    disk = _slab_with_holes(tmp_path)
    before = records(disk)
    real_pwrite = os.pwrite
    writes: list[int] = []

    def pwrite(fd: int, data: Any, off: int) -> int:
        writes.append(off)
        if fail == "second write" and len(writes) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, off)

    def fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(disktier_module.os, "pwrite", pwrite)
    if fail == "sync":
        monkeypatch.setattr(disktier_module.os, "fdatasync", fdatasync)
    with pytest.raises(TierError, match="No space left" if fail != "sync" else "Input/output"):
        disk.put_many([20, 21, 22, 23], [payload(p) for p in (20, 21, 22, 23)], [20, 21, 22, 23])
    monkeypatch.undo()
    assert records(disk) == before and not any(pid in disk for pid in (20, 21, 22, 23))
    disk.put(30, payload(30), 30)
    disk.put(31, payload(31), 31)
    assert disk.pages[30] == 1 and disk.pages[31] == 2 and disk.get(30) == payload(30)
    with pytest.raises(TierError, match="slots hold"):
        disk.put_many([40, 41], [payload(40), bytes(disk.stride)], [40, 41])
    assert 40 not in disk and records(disk) == {**before, 1: 30, 2: 31}
    many = list(range(50, 57))
    with pytest.raises(CapacityError):  # 6 pages on a 12-page disk: room for 6 more
        disk.put_many(many, [payload(p) for p in many], many)
    assert records(disk) == {**before, 1: 30, 2: 31} and len(disk) == 6
    disk.close()


def test_long_runs_cleared_by_writes_of_at_most_run_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``remove_many`` cuts a run of adjacent slots longer than ``RUN_BYTES`` covers into runs of that
    many slots, and frees the slots in the order of the pages, as ``remove`` one at a time does."""
    one, many = DiskTier(tmp_path / "one", 32, PAGE), DiskTier(tmp_path / "many", 32, PAGE)
    for disk in (one, many):
        for pid in range(20):
            disk.put(pid, payload(pid), pid)
    monkeypatch.setattr(disktier_module, "RUN_BYTES", 3 * many.stride)
    real = disktier_module.os.pwrite
    writes: list[tuple[int, int]] = []

    def pwrite(fd: int, data: Any, offset: int) -> int:
        writes.append((offset // many.stride, (len(data) - 8) // many.stride + 1))
        return real(fd, data, offset)

    gone = [9, 2, 3, 4, 5, 6, 7, 8, 12, 17, 16, 15]  # runs 2..9 (8 slots), 12, 15..17
    for pid in gone:
        one.remove(pid)
    monkeypatch.setattr(disktier_module.os, "pwrite", pwrite)
    many.remove_many(gone)
    assert writes == [(2, 3), (5, 3), (8, 2), (12, 1), (15, 3)]
    assert records(many) == records(one) and many.free_slots == one.free_slots and many.pages == one.pages
    for disk in (one, many):
        disk.close()


def test_host_remove_many_is_remove_one_at_a_time() -> None:
    """``HostTier.remove_many`` leaves what ``remove`` each leaves, and takes no lock when none of the
    pages is on the host (pages forgotten from disk)."""
    from morphcache.runtime.tiers import HostTier

    for gone in ([], [5, 6], [1, 5, 3], [3, 3, 9], [0, 1, 2, 3]):
        one, many = HostTier(8), HostTier(8)
        for host in (one, many):
            host.put_many([0, 1, 2, 3], [payload(p) for p in range(4)])
        for pid in gone:
            one.remove(pid)
        many.remove_many(gone)
        assert many.data == one.data and list(many.data) == list(one.data)
    host = HostTier(8)
    host.put(1, payload(1))
    host._lock = None  # type: ignore[assignment]  # any use of the lock would fail
    host.remove_many([5, 6, 7])
    assert host.data == {1: payload(1)}
