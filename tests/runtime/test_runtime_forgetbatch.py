"""The cleanup after a batch of forgotten pages (``Collector.forgotten_many``: payloads, disk records
cleared by runs of adjacent slots, index entries, sealed rows, policy entries) against the cleanup
page by page: the same random workloads on two managers, one cleaning up one page at a time; after
every operation both hold identical state (index, policy, disk slab and its leftovers), also when
the writes clearing some slots' records fail.  The batched cleanup's recorded steps conform."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rt_helpers import toks
from test_runtime_conformance import INSTANCE, check_all
from test_runtime_poolbatch import big_writes, counting, policy_state, twins
from test_runtime_roombatch import drive, long_writes

from morphcache.runtime import CacheManager, RuntimeConfig
from morphcache.runtime import disktier as disktier_module
from morphcache.runtime.disktier import DiskTier
from morphcache.runtime.lru import LRUPolicy
from morphcache.testing.diskdamage import records


def index_state(m: CacheManager) -> tuple[Any, ...]:
    """What the prefix index keeps: its entries (and their key table's answers), continuations, rows."""
    ix = m.parts.index
    keys = list(ix.by_hash)
    found = ix.table.find(np.array(keys, dtype=np.uint64)).tolist() if keys else []
    rows = ix.sealed
    return (dict(ix.by_hash), found, ix.table.problems(ix.by_hash), ix.table.keys.tobytes(),
            ix.table.pages.tobytes(), dict(ix.kids.info),
            {pid: tuple(t) for pid, t in ix.kids.tokens.items()}, ix.kids.sealed_with(0),
            {h: ix.kids.sealed_with(h) for h in keys}, rows.cls.tobytes(), rows.pcls.tobytes(),
            rows.rows.tobytes())


def disk_state(m: CacheManager) -> tuple[Any, ...]:
    disk = m.parts.storage.disk
    assert disk is not None
    return (dict(disk.pages), list(disk.leftovers.items()), list(disk.free_slots), disk.end, records(disk),
            m.parts.pipe.store.free_page_ids[:])


def same(ms: list[CacheManager]) -> None:
    for view in (policy_state, index_state, disk_state):
        assert view(ms[0]) == view(ms[1]), view.__name__


def failing_clears(monkeypatch: pytest.MonkeyPatch, bad: set[int], stride: int) -> list[int]:
    """Make every write clearing a record that covers the magic of one of the slots ``bad`` fail (as a
    failing sector would); returns the slots whose clearing failed."""
    real = os.pwrite
    hit: list[int] = []

    def pwrite(fd: int, data: Any, offset: int) -> int:
        clearing = not bytes(data[:8]).startswith(disktier_module.MAGIC)
        covered = [s for s in bad if offset <= s * stride < offset + len(data)]
        if clearing and covered:
            hit.extend(covered)
            raise OSError(5, "Input/output error")
        return real(fd, data, offset)

    monkeypatch.setattr(disktier_module.os, "pwrite", pwrite)
    return hit


TAILS = [[(7 * j + k) % 50 for j in range(24)] for k in range(3)]


def same_writes(twin: Any, rng: random.Random, i: int, seqs: list[str]) -> None:
    """Sequences with one of two heads extended by one of three tails: pages written twice (sealed
    duplicates, the indexed one forgotten with the others in one batch)."""
    if seqs and rng.random() < 0.5:
        sid = rng.choice(seqs)
        tail = rng.choice(TAILS)
        twin.do(lambda m, _: m.append(sid, tail))
        return
    sid = f"w{i}"
    head = toks(1000 * rng.randrange(1, 3), 4 * rng.randrange(2, 6))
    twin.do(lambda m, _: m.register(sid, head))
    seqs.append(sid)


def run(ms: list[CacheManager], twin: Any, rng: random.Random, steps: int, writes: tuple[Any, ...]) -> None:
    """``drive`` with one of ``writes`` chosen at random for each write, policy, index and disk compared."""
    assert list(twin.ms) == ms
    drive(twin, rng, steps, policy_state, index_state, disk_state,
          write=lambda t, r, i, seqs: r.choice(writes)(t, r, i, seqs), share=0.6, keep=3)


@pytest.mark.parametrize("seed,fault,writes", [
    (1, False, (big_writes,)), (2, False, (long_writes,)), (3, True, (big_writes,)), (4, True, (long_writes,)),
    (5, False, (same_writes, big_writes)), (6, True, (same_writes, big_writes))])
def test_cleanup_together_is_cleanup_page_by_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  seed: int, fault: bool, writes: tuple[Any, ...]) -> None:
    done = counting(monkeypatch)
    small = long_writes in writes
    ms, twin = twins(tmp_path, gpu_pages=40 if small else 100, host_pages=8, disk_pages=96,
                     pool_capacity=10 if small else 32)
    ms[1].parts.collector.batched = False
    disk = ms[0].parts.storage.disk
    assert disk is not None
    hit = failing_clears(monkeypatch, {s for s in range(400) if s % 3 == 1}, disk.stride) if fault else []
    run(ms, twin, random.Random(seed), 40, writes)
    assert done, "no admission was made in one go"
    if fault:
        assert hit, "no clearing write failed"
        monkeypatch.undo()
        assert [m.parts.storage.disk.sweep() for m in ms] == [0, 0]  # type: ignore[union-attr]
        same(ms)
    for m in ms:
        m.check_integrity()
        m.close()


@pytest.mark.parametrize("seed,writes", [(7, (big_writes,)), (8, (same_writes, big_writes))])
def test_policy_entries_dropped_in_bulk_as_page_by_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int,
                                                       writes: tuple[Any, ...]) -> None:
    """The twins above with the LRU's entries of every batch dropped by its vector path
    (``removes_scalar`` 0), not its scalar loop."""
    monkeypatch.setattr(LRUPolicy, "removes_scalar", 0)
    ms, twin = twins(tmp_path, gpu_pages=100, host_pages=8, disk_pages=96, pool_capacity=32)
    ms[1].parts.collector.batched = False
    run(ms, twin, random.Random(seed), 40, writes)
    for m in ms:
        m.check_integrity()
        m.close()


def test_an_indexed_page_and_its_duplicate_forgotten_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages written twice (``a`` and ``b`` end in the same tokens), all evicted in one batch: each
    indexed page's duplicate, forgotten later in the batch, takes over its hash for a while, as one at
    a time."""
    done = counting(monkeypatch)
    ms, twin = twins(tmp_path, gpu_pages=40, host_pages=8, disk_pages=64, pool_capacity=12)
    ms[1].parts.collector.batched = False
    m = ms[0]
    kids, records = m.parts.index.kids, m.parts.pages.records
    real = kids.duplicate
    pending: list[int] = []  # takeovers by a page already forgotten, not yet cleaned up

    def duplicate(*args: Any) -> int | None:
        other = real(*args)
        if other is not None and other not in records:
            pending.append(other)
        return other

    monkeypatch.setattr(kids, "duplicate", duplicate)
    head, tail = toks(1000, 8), toks(5000, 16)
    twin.do(lambda m, _: m.register("a", head + tail))
    twin.do(lambda m, _: m.register("b", head))
    twin.do(lambda m, _: m.append("b", tail))
    for sid in ("a", "b"):
        twin.do(lambda m, _: m.free(sid))  # noqa: B023 - called at once
        same(ms)
    twin.do(lambda m, _: m.register("c", toks(9000, 48)))  # 12 pages: the whole pool evicted at once
    same(ms)
    assert done == [12] and pending, "no duplicate took over while forgotten"
    for m in ms:
        m.check_integrity()
        m.close()


def test_runs_of_adjacent_records_cleared_by_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = DiskTier(tmp_path / "disk", 16, 40)
    for pid in range(10):
        disk.put(pid, bytes([pid + 1]) * 40, pid)
    assert disk.pages == {pid: pid for pid in range(10)}
    failed = failing_clears(monkeypatch, {6}, disk.stride)
    faulty = disktier_module.os.pwrite
    writes: list[tuple[int, int]] = []

    def pwrite(fd: int, data: Any, offset: int) -> int:
        writes.append((offset // disk.stride, len(data)))
        return faulty(fd, data, offset)  # type: ignore[no-any-return]

    monkeypatch.setattr(disktier_module.os, "pwrite", pwrite)
    disk.remove_many([5, 2, 3, 6, 4, 9, 11])  # slots 2..6 a run (6 fails), 9 alone; 11 is not on disk
    stride = disk.stride
    assert writes == [(2, 4 * stride + 8), (2, 8), (3, 8), (4, 8), (5, 8), (6, 8), (9, 8)]
    assert failed == [6, 6]
    assert disk.leftovers == {6: 6} and sorted(disk.free_slots) == [2, 3, 4, 5, 9]
    assert records(disk) == {0: 0, 1: 1, 6: 6, 7: 7, 8: 8}
    assert disk.get(7) == bytes([8]) * 40  # the neighbours' records whole
    monkeypatch.undo()
    assert disk.sweep() == 0 and records(disk) == {0: 0, 1: 1, 7: 7, 8: 8}
    disk.close()


def test_batched_cleanup_conforms(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = {**INSTANCE, "gpu_pages": 24, "disk_pages": 0, "pool_capacity": 6}
    m = CacheManager(config=RuntimeConfig(**opts, record=True))
    cleaned: list[int] = []
    real = m.parts.collector.forgotten_many

    def forgotten_many(recs: list[Any]) -> None:
        cleaned.append(len(recs))
        real(recs)

    monkeypatch.setattr(m.parts.collector, "forgotten_many", forgotten_many)
    m.register("a", toks(0, 12))
    m.free("a")
    m.register("b", toks(100, 12))  # each page evicts one of the pool, forgotten with the others
    steps = m.steps()
    assert sum(s.event == "forget" for s in steps) >= 4 and sum(cleaned) >= 4, "no batch of forgotten pages"
    assert check_all(m, steps) == []
    m.check_integrity()
    m.close()
