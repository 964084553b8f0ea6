"""The vector backend's step class (batchplan.py): a batch of ``admit`` over many pages, whose guard
counts the pooled pages, against the same firings one by one, on random states of a working manager
(the pool anywhere from empty to full, the pages a mix of admissible, pooled and not admissible).
Atomic or not, both must fire the same firings (or refuse with the same message), leave the same
state and aggregates, and count the same firings and refusals."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rt_helpers import small_config, spec_variant
from test_runtime_roombatch import long_writes

from morphcache.runtime import CacheManager
from morphcache.runtime.batchplan import STEP
from morphcache.runtime.binding import POOL
from morphcache.runtime.errors import GuardRefused


class One:
    """One manager in place of ``Twins`` (the workload helpers' ``do``)."""

    def __init__(self, m: CacheManager) -> None:
        self.m = m

    def do(self, op: Any) -> Any:
        return op(self.m, 0)


def outcome(m: CacheManager, evicted: list[int], pids: list[int], atomic: bool, vector: bool) -> tuple[Any, ...]:
    """Evict ``evicted`` (where the spec lets it), then admit ``pids`` as one batch (``vector``: by
    ``fire_batch``, else one by one); what came of it, all undone afterwards."""
    pipe = m.parts.pipe
    store = pipe.store
    refused = dict(pipe.refused)  # refusal counts outlive a rollback: compared as what this adds
    sp = pipe.begin()
    try:
        for pid in evicted:
            pipe.propose("evict", None, pid)
        before = pipe.vector_firings
        arr = np.asarray(pids, dtype=np.int64)
        try:
            if vector:
                res: Any = pipe.fire_batch("admit", None, arr, atomic=atomic, distinct=True).tolist()
            else:
                res = pipe.fire_each(pipe.cspec.events["admit"], None, arr, len(arr), atomic).tolist()
        except GuardRefused as exc:
            res = ("refused", str(exc))
        pipe.names.refresh()
        aggs = {name: pipe.names.n[name] for name in pipe.cspec.aggregates}
        state = {name: store.vecs[name][:store.page_cap].tobytes() for name in store.page_names}
        counts = (dict(pipe.fired), {k: v - refused.get(k, 0) for k, v in pipe.refused.items()})
        vectored = pipe.vector_firings - before
    finally:
        pipe.rollback(sp)
    return res, aggs, state, counts, vectored


COUNT = "sum(1 if pool[q] == 'pooled' else 0 for q in pages)"
GAP = f"complete_morphology(p) and tier[p] == 'gpu' and {COUNT} < CAPACITY and {COUNT} != 5"  # a count skipped


@pytest.mark.parametrize("seed,guard", [(1, None), (2, None), (3, GAP)])
def test_step_batch_is_one_by_one(tmp_path: Path, seed: int, guard: str | None) -> None:
    """(``GAP``: an admission refused at one count and allowed at the next, so a batch that is not
    all or none must stop at its first refusal.)"""
    spec = None if guard is None else spec_variant(tmp_path, {"objects.pool.events.admit.guard": guard})
    m = CacheManager(spec, config=small_config(tmp_path / "m", gpu_pages=64, host_pages=16, disk_pages=64,
                                         pool_capacity=12))
    twin = One(m)
    ev = m.parts.cspec.events["admit"]
    assert STEP in (m.parts.pipe.planner.plan(ev, None, np.arange(20)) or ()).conjuncts  # type: ignore[union-attr]
    rng = random.Random(seed)
    seqs: list[str] = []
    vectored = compared = 0
    for i in range(30):
        long_writes(twin, rng, i, seqs)  # type: ignore[arg-type]
        if len(seqs) > 4:
            sid = seqs.pop(0)
            m.free(sid)
        live = sorted(m.page_ids())
        pool = m.parts.pipe.store.vecs[POOL]
        pooled = [pid for pid in live if pool[pid] == m.parts.cspec.codes[POOL]["pooled"]]
        for _ in range(4):
            evicted = rng.sample(pooled, rng.randrange(len(pooled) + 1))
            pids = rng.sample(live, min(len(live), rng.randrange(16, 40)))
            for atomic in (True, False):
                got = outcome(m, evicted, pids, atomic, vector=True)
                want = outcome(m, evicted, pids, atomic, vector=False)
                assert got[:4] == want[:4], (i, atomic)
                vectored += got[4] > 0
                compared += 1
    assert vectored > compared // 4, "the vector backend hardly decided a batch"
    m.check_integrity()
    m.close()
