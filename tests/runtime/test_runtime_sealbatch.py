"""The batched bookkeeping of a long write against the same calls one at a time, on random runs that
hit every case the batches must fall back on (a page filed already, a shared hash, a page with
tokens, a hash indexed already, duplicates inside one batch): the continuations a run of opened
pages files (``Continuations.add_run``), the continuations and index entries of a run of sealed
pages (``Continuations.sealed_run``, ``PrefixIndex.add_sealed_many``), a run's GPU slots
(``SlotPool.take_many``)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from morphcache.runtime.continuations import Continuations
from morphcache.runtime.errors import CapacityError
from morphcache.runtime.index import PrefixIndex
from morphcache.runtime.tiers import SlotPool


def _state(k: Continuations) -> dict[str, Any]:
    """Everything a ``Continuations`` keeps (its maps compared by value)."""
    return {name: value for name, value in vars(k).items()}


@pytest.mark.parametrize("seed", range(6))
def test_a_run_of_opened_pages_files_them_as_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    one, run = Continuations(), Continuations()
    hashes = [rng.getrandbits(64) for _ in range(6)]  # few: runs share hashes with earlier pages
    for _ in range(60):
        count = rng.randrange(0, 7)
        pids = rng.sample(range(40), count)  # some filed already, under the same hash or another
        parents = [rng.choice(hashes) if rng.random() < 0.4 else rng.getrandbits(64) for _ in pids]
        tokens: list[list[int]] = [[] if rng.random() < 0.8 else [rng.randrange(3)] for _ in pids]
        parent = rng.randrange(-1, 40)
        before = parent
        for h, pid, toks in zip(parents, pids, tokens, strict=True):
            one.add(h, pid, toks, before)
            before = pid
        run.add_run(parents, pids, tokens, parent)
        assert _state(one) == _state(run)
        for h in {*hashes, *parents}:
            for first in range(3):
                assert sorted(one.starting(h, first)) == sorted(run.starting(h, first))
        assert _state(one) == _state(run)


@pytest.mark.parametrize("seed", range(6))
def test_a_run_of_sealed_pages_is_filed_and_indexed_as_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    one, run = PrefixIndex(4), PrefixIndex(4)
    keys = [rng.getrandbits(64) for _ in range(8)]
    for pid in range(30):  # continuations to update (some pages have none)
        if rng.random() < 0.8:
            h = rng.choice(keys)
            for ix in (one, run):
                ix.add_child(h, pid, [pid], -1)
    for _ in range(50):
        count = rng.randrange(1, 7)
        pids = rng.sample(range(36), count)  # some sealed already, with the same hash or another
        hashes = [rng.choice(keys) if rng.random() < 0.3 else rng.getrandbits(64) for _ in pids]
        tokens = [[rng.randrange(5) for _ in range(4)] for _ in pids]
        kept = [one.seal(pid, -1, toks) for pid, toks in zip(pids, tokens, strict=True)]
        for h, pid in zip(hashes, pids, strict=True):
            one.add_sealed(h, pid)
        rows = np.array(tokens, dtype=np.uint64)
        assert run.seal_many(pids, [-1] * count, tokens, rows, hashes) == kept
        assert _state(one.kids) == _state(run.kids)
        assert one.sealed.cls.tobytes() == run.sealed.cls.tobytes()
        assert one.by_hash == run.by_hash and list(one.by_hash) == list(run.by_hash)
        assert one.table.keys.tobytes() == run.table.keys.tobytes()
        assert one.table.pages.tobytes() == run.table.pages.tobytes()
        assert run.table.problems(run.by_hash) == []
        for h in {*keys, *hashes}:
            assert one.kids.sealed_with(h) == run.kids.sealed_with(h)
    found = run.table.find(np.array(list(run.by_hash), dtype=np.uint64)).tolist()
    assert found == list(run.by_hash.values())


def test_a_run_takes_the_slots_taking_them_one_by_one_would() -> None:
    rng = random.Random(7)
    one, run = SlotPool(24), SlotPool(24)
    for _ in range(40):
        if rng.random() < 0.5 and one.owner:
            gone = rng.sample(sorted(one.owner), rng.randrange(1, len(one.owner) + 1))
            for pool in (one, run):
                pool.give_many(gone)
        pids = [rng.randrange(1000) for _ in range(rng.randrange(0, 6))]
        if len(pids) > len(one.free_slots):
            with pytest.raises(CapacityError):
                run.take_many(pids)
            continue
        assert run.take_many(pids) == [one.take(pid) for pid in pids]
        assert run.owner == one.owner and run.free_slots == one.free_slots
