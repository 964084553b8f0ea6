"""``forget`` fired as one batch on the pages a pool's eviction leaves free (``Collector.collect_in_turn``)
against the same collection page by page: the same random workloads on two managers, the second
admitting and collecting one page at a time; after every operation both hold identical state (policy,
index, disk, refusal counts).  A refused batch falls back to one at a time and resumes the walks page
by page after the refusal.  The batch's recorded steps conform."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rt_helpers import toks
from test_runtime_conformance import INSTANCE, check_all
from test_runtime_forgetbatch import run, same, same_writes
from test_runtime_poolbatch import big_writes, counting, twins
from test_runtime_roombatch import long_writes

from morphcache.runtime import CacheManager, RuntimeConfig
from morphcache.runtime import collect as collect_module
from morphcache.runtime.errors import GuardRefused
from morphcache.runtime.pipeline import Pipeline


def batches(monkeypatch: pytest.MonkeyPatch, m: CacheManager) -> list[int]:
    """The sizes of the batches of ``forget`` fired (or refused) on ``m``; every plan of at least two
    pages is fired as one."""
    monkeypatch.setattr(collect_module, "FIRE_FROM", 2)
    sizes: list[int] = []
    col = m.parts.collector
    real = col._fire_together

    def together(plan: list[int]) -> bool:
        sizes.append(len(plan))
        return real(plan)

    monkeypatch.setattr(col, "_fire_together", together)
    return sizes


def refusing(monkeypatch: pytest.MonkeyPatch, ms: list[CacheManager], bad: set[int]) -> list[int]:
    """Make the spec refuse ``forget`` on the pages ``bad`` (as a copy in flight the runtime does not
    see would), one at a time and in a batch, counted as a refusal; returns the batches refused."""
    refused_batches: list[int] = []
    real_fire, real_firer, real_batch = Pipeline.fire, Pipeline.firer, Pipeline.fire_batch

    def refuse(pipe: Pipeline, pid: int) -> None:
        pipe.refused["forget"] += 1
        raise GuardRefused("forget", pid, None, "", "pin[p] == 0", "pin[p] == 0")

    def fire(pipe: Pipeline, name: str, r: Any = None, p: Any = None, **kw: Any) -> Any:
        if name == "forget" and p in bad:
            refuse(pipe, p)
        return real_fire(pipe, name, r, p, **kw)

    def firer(pipe: Pipeline, name: str) -> Any:
        plan = real_firer(pipe, name)

        def fire(r: Any, p: Any, params: Any, observed: Any) -> None:
            if name == "forget" and p in bad:
                refuse(pipe, p)
            plan(r, p, params, observed)
        return fire

    def fire_batch(pipe: Pipeline, name: str, r: Any, p: Any, **kw: Any) -> np.ndarray:
        if name == "forget" and p is not None:
            hit = [pid for pid in p.tolist() if pid in bad]
            if hit:
                refused_batches.append(len(p))
                refuse(pipe, hit[0])
        return real_batch(pipe, name, r, p, **kw)

    monkeypatch.setattr(Pipeline, "fire", fire)
    monkeypatch.setattr(Pipeline, "firer", firer)
    monkeypatch.setattr(Pipeline, "fire_batch", fire_batch)
    return refused_batches


@pytest.mark.parametrize("seed,writes", [
    (1, (big_writes,)), (2, (long_writes,)), (5, (same_writes, big_writes))])
def test_forget_in_one_batch_is_forget_page_by_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    seed: int, writes: tuple[Any, ...]) -> None:
    done = counting(monkeypatch)
    small = long_writes in writes
    ms, twin = twins(tmp_path, gpu_pages=40 if small else 100, host_pages=8, disk_pages=96,
                     pool_capacity=10 if small else 32)
    sizes = batches(monkeypatch, ms[0])
    run(ms, twin, random.Random(seed), 40, writes)
    assert done and sizes, "no forget fired in one batch"
    for m in ms:
        m.check_integrity()
        m.close()


SHORT = [4, 8, 4, 4, 8, 4, 4, 4, 4, 4]  # tokens: one or two pages each (12), the pool's capacity


@pytest.mark.parametrize("bad", [{3}, {1}, {0, 5, 9}, {11}])
def test_a_refused_batch_goes_on_page_by_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: set[int]) -> None:
    """The whole pool (short sequences, each page's walk its own) evicted at once, ``forget`` refused on
    some of its pages: the batch is refused and the walks go on as one at a time, from the victim after
    the refused walk (the refused pages stay, leaked, alike on both)."""
    done = counting(monkeypatch)
    ms, _ = twins(tmp_path, gpu_pages=40, host_pages=8, disk_pages=64, pool_capacity=12)
    sizes = batches(monkeypatch, ms[0])
    refused = refusing(monkeypatch, ms, bad)
    for m in ms:  # not ``Twins.do``: its integrity check would find the refused pages leaked
        for i, n in enumerate(SHORT):
            m.register(f"s{i}", toks(1000 * (i + 1), n))
            m.free(f"s{i}")
    same(ms)
    for m in ms:
        m.register("c", toks(9000, 48))  # 12 pages: the whole pool evicted at once
    same(ms)
    assert done == [12] and sizes and refused, "no batch of forgets refused"
    counts = [m.metrics().events_refused.get("forget", 0) for m in ms]
    assert counts[0] == counts[1] > 0
    assert [sorted(m.parts.pages.records) for m in ms] == [sorted(ms[1].parts.pages.records)] * 2
    for m in ms:
        m.close()


def test_forget_in_one_batch_conforms(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = {**INSTANCE, "gpu_pages": 24, "disk_pages": 0, "pool_capacity": 6}
    m = CacheManager(config=RuntimeConfig(**opts, record=True))
    sizes = batches(monkeypatch, m)
    m.register("a", toks(0, 12))
    m.free("a")
    m.register("b", toks(100, 12))  # each page evicts one of the pool, all forgotten in one batch
    steps = m.steps()
    assert max(sizes, default=0) >= 4 and sum(s.event == "forget" for s in steps) >= 4, "no batch of forgets"
    assert check_all(m, steps) == []
    m.check_integrity()
    m.close()


@pytest.mark.parametrize("seed,writes", [(3, (big_writes,)), (6, (same_writes, big_writes))])
def test_no_walk_starts_as_planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int,
                                   writes: tuple[Any, ...]) -> None:
    """``Collector._stopped`` (every victim's walk stops at once) against the plan of the same walks:
    wherever it answers, the plan forgets nothing and defers exactly the victims it names."""
    ms, twin = twins(tmp_path, gpu_pages=100, host_pages=8, disk_pages=96, pool_capacity=32)
    col = ms[0].parts.collector
    real = col._stopped
    seen: list[bool] = []

    def stopped(pids: list[int], keeps: list[int]) -> list[int] | None:
        got = real(pids, keeps)
        plan, _, deferred = col._plan(pids, keeps)
        if got is not None:
            assert plan == [] and got == [pid for _, pid in deferred]
        seen.append(got is not None)
        return got

    monkeypatch.setattr(col, "_stopped", stopped)
    run(ms, twin, random.Random(seed), 40, writes)
    assert any(seen) and not all(seen), "no call both ways"
    for m in ms:
        m.check_integrity()
        m.close()
