"""The page writer's bulk work against the plain one: a record made for an opened page equals the one
the keyword constructor makes; sealed rows stored as one array equal rows stored one by one; a run of
tokens written to the data plane at once equals it written page by page; and the
same random workloads on two managers, one writing page by page (``PageWriter.bulk`` off), give the
same answers and refusals and leave identical state, the policy's included; the recorded steps of
bulk writes conform."""

from __future__ import annotations

import random
from array import array
from pathlib import Path

import numpy as np
import pytest
from rt_helpers import small_config, toks
from test_runtime_conformance import INSTANCE, check_all
from test_runtime_poolbatch import big_writes, policy_state
from test_runtime_roombatch import Twins, drive

from morphcache.runtime import CacheManager, RuntimeConfig
from morphcache.runtime.chainhash import ROOT_HASH, chain_hash, run_keys
from morphcache.runtime.index import SealedRows
from morphcache.runtime.pages import MetaColumns, PageRecord
from morphcache.runtime.policy import PageMeta
from morphcache.runtime.state import StateStore
from morphcache.runtime.store import MemoryPageStore, expected_payload


def _slots(cls: type) -> list[str]:
    return [name for klass in cls.__mro__ for name in getattr(klass, "__slots__", ())]


def test_an_opened_record_equals_the_constructed_one() -> None:
    made, fast = MetaColumns(4), MetaColumns(4)
    for cols in (made, fast):  # stale values where the pages were: both must reset them
        cols.ensure(40)
        cols.last_use[:], cols.uses[:], cols.holders[:] = 7, 3, 2
    want = PageRecord(made, 37, 12, 0xABC, 5, session="s", task="t", writer="w", bytes=512)
    got = PageRecord.opened(fast, 37, 12, 0xABC, 5, "s", "t", "w", 512)
    names = [name for name in _slots(PageRecord) if name != "cols"] + ["last_use", "uses", "holders"]
    assert set(_slots(PageMeta)) <= set(names)
    for name in names:
        assert getattr(got, name) == getattr(want, name), name
    assert got.token_ids == [] and got.token_ids is not want.token_ids
    assert (fast.last_use == made.last_use).all() and (fast.uses == made.uses).all()
    assert (fast.holders == made.holders).all()


def test_a_run_of_opened_records_equals_them_opened_one_by_one() -> None:
    """``PageRecord.opened_run`` against ``opened`` page by page (each the next one's parent), the
    columns grown past their size and reset the same way; ``alloc_pages`` against ``alloc_page``."""
    rng = random.Random(3)
    m = CacheManager(config=small_config(gpu_pages=8))
    cspec = m.parts.pipe.store.cspec
    for _ in range(40):
        pids = rng.sample(range(200), rng.randrange(0, 9))
        one, run = MetaColumns(4), MetaColumns(4)
        size = rng.randrange(4, 60)
        for cols in (one, run):
            cols.ensure(size)
            cols.last_use[:], cols.uses[:], cols.holders[:] = 7, 3, 2
        hashes = [rng.getrandbits(64) for _ in pids]
        parent, want = 9, []
        for j, (pid, h) in enumerate(zip(pids, hashes, strict=True)):
            want.append(PageRecord.opened(one, pid, parent, h, 4 + j, "s", None, "w", 64))
            parent = pid
        got = PageRecord.opened_run(run, pids, 9, hashes, 4, "s", None, "w", 64)
        names = [name for name in _slots(PageRecord) if name != "cols"] + ["last_use", "uses", "holders"]
        assert [[getattr(r, x) for x in names] for r in got] == [[getattr(r, x) for x in names] for r in want]
        assert all(np.array_equal(getattr(one, c), getattr(run, c)) for c in ("last_use", "uses", "holders"))
    for _ in range(40):  # page ids: freed ones first, latest freed first, then fresh ones, the store grown
        a, b = StateStore(cspec, 4), StateStore(cspec, 4)
        for store in (a, b):
            store.begin()
        for _ in range(rng.randrange(1, 10)):
            if rng.random() < 0.3 and a.live_pages:
                pid = rng.choice(sorted(a.live_pages))
                a.free_page(pid)
                b.free_page(pid)
            else:
                k = rng.randrange(0, 70)
                assert [a.alloc_page() for _ in range(k)] == b.alloc_pages(k)
        assert (a.page_cap, a.next_page, a.free_page_ids, list(a.live_pages), a.journal) == (
            b.page_cap, b.next_page, b.free_page_ids, list(b.live_pages), b.journal)
    m.close()


@pytest.mark.parametrize("seed", range(4))
def test_sealed_rows_in_one_array_are_rows_one_by_one(seed: int) -> None:
    """Chains of pages (a parent sealed earlier, in the same batch, or none), contents repeated so that
    classes are shared, some forgotten between batches."""
    rng = random.Random(seed)
    c = 4
    one, many = SealedRows(c, 8), SealedRows(c, 8)
    sealed: list[int] = []
    pid = 0
    for _ in range(30):
        pids, parents = [], []
        parent = rng.choice([-1, *sealed]) if sealed else -1
        for _ in range(rng.randrange(1, 7)):
            pids.append(pid)
            parents.append(parent)
            parent, pid = pid, pid + 1
        rows = np.array([[rng.randrange(3) for _ in range(c)] for _ in pids], dtype=np.uint64)
        for p, q, row in zip(pids, parents, rows, strict=True):
            one.seal(p, q, row.tolist())
        many.seal_many(pids, parents, rows)
        sealed += pids
        for gone in rng.sample(sealed, k=min(len(sealed), rng.randrange(3))):  # leaves first: children stay
            if all(q != gone for q in parents):
                one.forget(gone)
                many.forget(gone)
                sealed.remove(gone)
        size = len(one.cls)
        assert len(many.cls) == size
        assert (one.rows == many.rows).all() and (one.cls == many.cls).all() and (one.pcls == many.pcls).all()
        assert one._intern == many._intern and one._members == many._members  # noqa: SLF001 - the model's own
        assert one.problems({}) == many.problems({})


@pytest.mark.parametrize("seed", [4, 5])
def test_a_run_written_at_once_is_written_page_by_page(seed: int) -> None:
    """``MemoryPageStore.write_run`` (a write's pages in one call) leaves the bytes ``write_tokens`` page
    by page leaves, from any offset, over pages already holding tokens."""
    rng = random.Random(seed)
    c = 4
    one, run = MemoryPageStore(24, c), MemoryPageStore(24, c)
    for _ in range(40):
        count = rng.randrange(1, 6)
        slots = rng.sample(range(24), count)
        depth, offset = rng.randrange(9), rng.randrange(c)
        n = rng.randrange((count - 1) * c - offset + 1, count * c - offset + 1) if count > 1 else \
            rng.randrange(1, c - offset + 1)
        tokens = [rng.randrange(1 << 64) for _ in range(n)]
        at, fill = 0, offset
        for i, slot in enumerate(slots):
            step = min(c - fill, n - at)
            one.write_tokens(slot, depth + i, fill, tokens[at:at + step])
            at, fill = at + step, 0
        run.write_run(slots, depth, offset, np.array(tokens, dtype=np.uint64))
        assert (one.buf == run.buf).all() and (one.used == run.used).all()


@pytest.mark.parametrize("seed", range(3))
def test_slots_read_at_once_are_read_one_by_one(seed: int) -> None:
    """``MemoryPageStore.read_many`` gives what ``read`` of each slot gives, in order, a partial page's
    zero tail and a prefix written by ``write_prefix`` included; a slot that holds nothing refuses the
    whole read as ``read`` refuses it."""
    rng = random.Random(seed)
    c = 4
    store = MemoryPageStore(24, c)
    for slot in rng.sample(range(24), 16):
        n = rng.randrange(1, c + 1)
        if rng.random() < 0.3:
            store.write_prefix(slot, n, expected_payload(toks(slot, n), rng.randrange(9), c))
        else:
            store.write_tokens(slot, rng.randrange(9), 0, [rng.randrange(1 << 64) for _ in range(n)])
    held = [slot for slot in range(24) if store.used[slot]]
    for _ in range(10):
        slots = rng.sample(held, rng.randrange(1, len(held) + 1))
        assert store.read_many(slots) == [store.read(slot) for slot in slots]
    empty = next(slot for slot in range(24) if not store.used[slot])
    with pytest.raises(KeyError):
        store.read(empty)
    with pytest.raises(KeyError):
        store.read_many([held[0], empty])


def test_a_recomputed_page_holds_its_expected_payload() -> None:
    """``MemoryPageStore.recompute`` writes the slot's whole row: the bytes ``expected_payload`` gives
    (zero-padded), over a slot that held something else, for any token (negative, wider than 64 bits)."""
    rng = random.Random(6)
    for c in (1, 4, 5):
        store = MemoryPageStore(6, c)
        for _ in range(60):
            slot, depth = rng.randrange(6), rng.randrange(1 << 20)
            tokens = [rng.choice([rng.randrange(-(1 << 70), 1 << 70), rng.randrange(1 << 33), rng.randrange(9)])
                      for _ in range(rng.randrange(c + 1))]
            before = store.buf.copy()
            store.buf[slot] = 7
            store.compress(slot)
            store.recompute(slot, depth, tokens)
            assert store.read(slot) == expected_payload(tokens, depth, c) and not store.compressed[slot]
            others = np.arange(6) != slot
            assert (store.buf[others] == before[others]).all()


def test_a_writes_keys_are_its_pages_chain_hashes() -> None:
    """``run_keys`` (page by page in Python ints below four pages, one vector pass from four) gives each
    page the hash ``chain_hash`` gives it, a partial page's first tokens ahead of the write's."""
    rng = random.Random(6)
    c = 4
    for _ in range(60):
        count, fill = rng.randrange(0, 7), rng.randrange(c)
        root = rng.choice([ROOT_HASH, rng.getrandbits(64)])
        head = [rng.randrange(1 << 64) for _ in range(fill)]
        tokens = [rng.randrange(1 << 64) for _ in range(count * c - fill + rng.randrange(c))]
        flat, want, h = head + tokens, [], root
        for k in range(count):
            h = chain_hash(h, flat[k * c:(k + 1) * c])
            want.append(h)
        assert run_keys(root, head, tokens, count, c) == want
        assert run_keys(root, head, array("Q", tokens), count, c) == want


def _twins(tmp_path: Path, **overrides: object) -> tuple[list[CacheManager], Twins]:
    opts: dict[str, object] = dict(gpu_pages=40, host_pages=8, disk_pages=64, pool_capacity=10, prefetch_workers=1)
    opts.update(overrides)
    ms = [CacheManager(config=small_config(tmp_path / name, **opts)) for name in ("bulk", "single")]
    ms[1].parts.sequences.writer.bulk = False
    return ms, Twins(ms[0], ms[1])


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the sealed rows stored as one array."""
    done: list[int] = []
    real = SealedRows.seal_many

    def seal_many(rows: SealedRows, pids: list[int], parents: list[int], tokens: np.ndarray) -> None:
        done.append(len(pids))
        real(rows, pids, parents, tokens)

    monkeypatch.setattr(SealedRows, "seal_many", seal_many)
    return done


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_write_in_bulk_is_a_write_page_by_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 seed: int) -> None:
    done = counting(monkeypatch)
    ms, twin = _twins(tmp_path)
    rng = random.Random(seed)
    drive(twin, rng, 60, policy_state)
    assert done and min(done) >= 4, "no write stored its sealed rows as one array"
    for m in ms:
        m.check_integrity()
        m.close()


def test_big_writes_in_bulk_are_writes_page_by_page(tmp_path: Path) -> None:
    ms, twin = _twins(tmp_path, gpu_pages=160, host_pages=32, pool_capacity=40)
    rng = random.Random(8)
    drive(twin, rng, 16, policy_state, write=big_writes, share=1, keep=2)
    for m in ms:
        m.check_integrity()
        m.close()


def test_bulk_writes_conform() -> None:
    m = CacheManager(config=RuntimeConfig(**{**INSTANCE, "gpu_pages": 24, "disk_pages": 0}, record=True))
    m.register("a", toks(0, 13))  # six pages sealed, one filling
    m.append("a", toks(13, 9))  # the filling page sealed, four more
    m.free("a")
    steps = m.steps()
    assert {"open", "append", "seal", "slide", "admit"} <= {s.event for s in steps}
    assert check_all(m, steps) == []
    m.check_integrity()
    m.close()
