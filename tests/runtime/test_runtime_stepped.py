"""Batches whose guard reads an aggregate each firing moves (``admit``: the pool count against the
capacity): the vector backend sees the count moved once for each firing before that fired
(batchplan.py ``stepped``, batch.py ``_counted``).  Against the same batch fired one by one on the
same state: the same firings fire (or the same refusal), the same state, count and fired events after;
recorded steps conform."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from rt_helpers import small_config, toks
from test_runtime_conformance import INSTANCE, check_all

from morphcache.runtime import CacheManager, RuntimeConfig
from morphcache.runtime import pipeline as pipeline_module
from morphcache.runtime.binding import POOL
from morphcache.runtime.errors import GuardRefused


def _after(m: CacheManager, fn: Any) -> tuple[Any, ...]:
    """Run ``fn`` in a transaction; what it returned (or the refusal's type) and the state it left,
    then roll it back."""
    pipe, store = m.parts.pipe, m.parts.pipe.store
    refused = dict(pipe.refused)  # (refusals are counted, not undone)
    sp = pipe.begin()
    try:
        out: Any = fn().tolist()
    except GuardRefused as err:
        out = type(err).__name__
    live = sorted(store.live_pages)
    agg = next(iter(m.parts.cspec.aggregates))
    state = (out, store.vecs[POOL][live].tolist(), pipe.names.n[agg], dict(pipe.fired),
             {k: v - refused.get(k, 0) for k, v in pipe.refused.items()})
    pipe.rollback(sp)
    return state


def test_admit_is_planned_with_its_count_stepped() -> None:
    m = CacheManager(config=small_config())
    plan = m.parts.pipe.planner.plan(m.parts.cspec.events["admit"], None, np.arange(20))
    assert plan is not None and plan.stepped == {next(iter(m.parts.cspec.aggregates)): 1} and plan.counted
    m.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stepped_batches_agree_with_one_by_one(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline_module, "VECTOR_FROM", 2)  # every batch of two or more: the vector backend
    m = CacheManager(config=small_config(gpu_pages=160, host_pages=16, pool_capacity=60))
    for i in range(5):
        m.register(f"s{i}", toks(1000 * i, 100))
    pipe, store = m.parts.pipe, m.parts.pipe.store
    admit = m.parts.cspec.events["admit"]
    rng = random.Random(seed)
    vector = partial = nothing = 0
    for _ in range(30):
        live = sorted(store.live_pages)
        sp = pipe.begin()
        evict = np.asarray(rng.sample(live, rng.randrange(0, min(len(live), 60))), dtype=np.int64)
        pipe.fire_batch("evict", None, evict, atomic=False, distinct=True)
        if rng.random() < 0.3:  # fill the pool first
            pipe.fire_each(admit, None, np.asarray(live, dtype=np.int64), len(live), False)
        pids = np.asarray(rng.sample(live, rng.randrange(16, min(len(live), 70))), dtype=np.int64)
        atomic = rng.random() < 0.4
        before = pipe.vector_firings
        batch = _after(m, lambda: pipe.fire_batch("admit", None, pids, atomic=atomic, distinct=True))  # noqa: B023
        vector += pipe.vector_firings > before
        one = _after(m, lambda: pipe.fire_each(admit, None, pids, len(pids), atomic))  # noqa: B023
        assert batch == one
        partial += isinstance(batch[0], list) and 0 < sum(batch[0]) < len(pids)
        nothing += isinstance(batch[0], list) and not any(batch[0])  # the pool full before the batch
        pipe.rollback(sp)
    assert vector > 6 and partial > 3 and nothing > 0
    m.check_integrity()
    m.close()


def test_stepped_batches_conform(monkeypatch: pytest.MonkeyPatch) -> None:
    """Admissions in one batch, some refused at the capacity, recorded and checked step by step."""
    monkeypatch.setattr(pipeline_module, "VECTOR_FROM", 2)  # the batch to the vector backend, whatever its length
    opts = {**INSTANCE, "gpu_pages": 48, "host_pages": 0, "disk_pages": 0, "pool_capacity": 20}
    m = CacheManager(config=RuntimeConfig(**{**opts, "auto_admit": False}, record=True))
    m.register("a", toks(0, 60))
    pipe, store = m.parts.pipe, m.parts.pipe.store
    pids = np.asarray(sorted(store.live_pages), dtype=np.int64)
    before = pipe.vector_firings
    fired = pipe.fire_batch("admit", None, pids, atomic=False, distinct=True)
    assert pipe.vector_firings > before and 0 < fired.sum() < len(pids)
    steps = m.steps()
    assert sum(s.event == "admit" for s in steps) == fired.sum() == 20
    assert check_all(m, steps) == []
    m.check_integrity()
    m.close()


def test_vector_from_is_per_event_unless_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each event's batches reach the vector backend from its own crossover; a lowered ``VECTOR_FROM``
    (the tests' knob) sends every event's from there, a raised one none below it."""
    vector_from = pipeline_module.vector_from
    assert vector_from("admit") == pipeline_module.EVENT_VECTOR_FROM["admit"] > pipeline_module.VECTOR_FROM
    assert vector_from("release_last") == pipeline_module.VECTOR_FROM
    monkeypatch.setattr(pipeline_module, "VECTOR_FROM", 2)
    assert vector_from("admit") == vector_from("release_last") == 2
    monkeypatch.setattr(pipeline_module, "VECTOR_FROM", 1000)
    assert vector_from("admit") == vector_from("release_last") == 1000
