"""Page aggregates kept up to date (names.py): the pool count taken from each changed page's pool state
(a table of the compiled body over the states) against the same count refreshed page by page by the
body, on the same random workloads (pool admissions with evictions, one at a time and in batches,
frees, recoveries); after every operation both managers gave the same answers (or refusals) and hold
the same state, counts, contributions and policy decisions.  Recorded steps fired on the tabled count
conform."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rt_helpers import small_config, toks
from test_runtime_conformance import INSTANCE, check_all
from test_runtime_differential import step
from test_runtime_poolbatch import big_writes, policy_state
from test_runtime_roombatch import Twins, long_writes

from morphcache.runtime import CacheManager, RuntimeConfig
from morphcache.runtime.binding import POOL
from morphcache.runtime.errors import GuardRefused


def refreshed(m: CacheManager) -> CacheManager:
    """``m`` with every aggregate refreshed by its body from the pages changed since it was read."""
    names = m.parts.pipe.names
    names.agg_deferred = [name for name, *_ in names.agg_tabled] + names.agg_deferred
    names.agg_tabled = []
    return m


def aggregates(m: CacheManager) -> tuple[Any, ...]:
    names = m.parts.pipe.names
    if names.agg_dirty:
        names.refresh()
    return tuple((names.n[name], sorted(names.agg_contrib[name].items())) for name in m.parts.cspec.aggregates)


def test_the_pool_count_is_tabled_by_pool_state() -> None:
    m = CacheManager(config=small_config())
    names = m.parts.pipe.names
    (name, var, kind, table), = names.agg_tabled
    assert (var, kind, names.agg_deferred) == (POOL, "sum", [])
    assert {state: table[code] for state, code in m.parts.cspec.codes[POOL].items()} == \
        {state: int(state == "pooled") for state in m.parts.cspec.codes[POOL]}
    m.close()


@pytest.mark.parametrize("seed,capacity,big", [(1, 6, False), (2, 12, False), (3, 40, True)])
def test_tabled_count_is_the_refreshed_count(tmp_path: Path, seed: int, capacity: int, big: bool) -> None:
    opts = dict(gpu_pages=160 if big else 40, host_pages=16, disk_pages=64, pool_capacity=capacity,
                prefetch_workers=1)
    ms = [CacheManager(config=small_config(tmp_path / name, **opts)) for name in ("tabled", "refreshed")]
    refreshed(ms[1])
    twin = Twins(ms[0], ms[1])
    rng = random.Random(seed)
    seqs: list[str] = []
    full = 0
    for i in range(40 if big else 70):
        if big:
            big_writes(twin, rng, i, seqs)
        elif rng.random() < 0.4:
            long_writes(twin, rng, i, seqs)
        else:
            step(twin, rng, i, seqs)
        assert aggregates(ms[0]) == aggregates(ms[1])
        assert policy_state(ms[0]) == policy_state(ms[1])
        full += len(ms[0].parts.morph.pooled) == capacity
        if len(seqs) > (2 if big else 4):
            sid = seqs.pop(0)
            twin.do(lambda m, _: m.free(sid))  # noqa: B023 - called at once
    assert full > 5, "the pool was hardly ever full"
    for m in ms:
        m.check_integrity()
        m.close()


def test_admissions_on_the_tabled_count_conform() -> None:
    """Admissions one at a time and in one go, refused ones and evictions, on the tabled count."""
    opts = {**INSTANCE, "gpu_pages": 24, "disk_pages": 0, "pool_capacity": 4}
    m = CacheManager(config=RuntimeConfig(**opts, record=True))
    m.register("a", toks(0, 8))  # 4 pages: the pool full
    m.free("a")
    m.register("b", toks(100, 4))  # 2 pages, one at a time, each evicting one of a's
    m.register("c", toks(200, 10))  # 5 pages (4 in one go)
    steps = m.steps()
    assert sum(s.event == "admit" for s in steps) >= 10 and sum(s.event == "evict" for s in steps) >= 6
    assert check_all(m, steps) == []
    m.check_integrity()
    m.close()


def test_tabled_count_through_batches_and_rollbacks() -> None:
    """Random batches of ``evict`` and ``admit`` (vector batches, one by one, refused ones) inside
    transactions: after each batch and each rollback the tabled count is the pages' count."""
    m = CacheManager(config=small_config(gpu_pages=96, host_pages=16, pool_capacity=48))
    for i in range(6):
        m.register(f"s{i}", toks(1000 * i, 60))
    pipe, store = m.parts.pipe, m.parts.pipe.store
    name = next(iter(m.parts.cspec.aggregates))
    pooled_code = m.parts.cspec.codes[POOL]["pooled"]

    def counted() -> int:
        live = np.fromiter(store.live_pages, dtype=np.int64)
        return int((store.vecs[POOL][live] == pooled_code).sum())

    rng = random.Random(5)
    fired = 0
    for _ in range(40):
        live = sorted(store.live_pages)
        sp = pipe.begin()
        for event in rng.sample(["evict", "admit", "evict"], 3):
            pids = np.asarray(rng.sample(live, rng.randrange(1, min(len(live), 40))), dtype=np.int64)
            try:
                fired += int(pipe.fire_batch(event, None, pids, atomic=rng.random() < 0.5, distinct=True).sum())
            except GuardRefused:
                pass
            assert pipe.names.n[name] == counted()
        pipe.rollback(sp)
        assert pipe.names.n[name] == counted()
    assert fired > 100
    m.check_integrity()
    m.close()
