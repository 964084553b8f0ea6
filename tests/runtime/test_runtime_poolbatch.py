"""Admission to a full pool in one go (poolbatch.py) against one page at a time: the same random
workloads on two managers, one of them never batching; after every operation both must have given
the same answer (or refusal) and hold identical state, the policy's included (its proposals for
every decision, its clock and stamps, its counts).  The batched admissions' recorded steps conform."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import small_config, spec_variant, toks
from test_runtime_conformance import INSTANCE, check_all
from test_runtime_roombatch import Twins, drive, long_writes

from morphcache.runtime import CacheManager, Ready, RuntimeConfig, poolbatch
from morphcache.runtime import morphology as morphology_module
from morphcache.runtime.poolbatch import exact_in_one_go


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the admissions made in one go."""
    done: list[int] = []
    real = morphology_module.admit_batch

    def batch(morph: Any, pids: list[int], *rest: Any) -> int:
        n = real(morph, pids, *rest)
        if n > 1:
            done.append(n)
        return n

    monkeypatch.setattr(morphology_module, "admit_batch", batch)
    return done


def policy_state(m: CacheManager) -> tuple[Any, ...]:
    """What the LRU policy will decide (its proposals for every decision: the buffered touches applied),
    its clock and stamps, and the seam's counts."""
    pol = m.parts.seam.policy
    proposals = tuple(tuple(pol.propose(d)) for d in ("gpu", "host", "disk", "pool"))
    snap = m.metrics()
    return (proposals, pol.clock, sorted(pol.pooled), sorted(pol.placed.items()), pol.code.tobytes(),
            pol.in_pool.tobytes(), pol.stamp.tobytes(), pol.pool_stamp.tobytes(), snap.policy_refusals,
            dict(snap.policy_victims), snap.events_refused, m.parts.storage.slots.free_slots)


def twins(tmp_path: Path, spec: Path | None = None, **overrides: Any) -> tuple[list[CacheManager], Twins]:
    opts = dict(gpu_pages=40, host_pages=8, disk_pages=64, pool_capacity=10, prefetch_workers=1)
    opts.update(overrides)
    ms = [CacheManager(spec, config=small_config(tmp_path / name, **opts)) for name in ("batched", "single")]
    ms[1].parts.morph.batchable = False
    return ms, Twins(ms[0], ms[1])


@pytest.mark.parametrize("seed,capacity", [(1, 10), (2, 10), (3, 4), (4, 24)])
def test_admission_in_one_go_is_admission_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        seed: int, capacity: int) -> None:
    done = counting(monkeypatch)
    ms, twin = twins(tmp_path, pool_capacity=capacity)
    rng = random.Random(seed)
    drive(twin, rng, 70, policy_state)
    assert done or capacity < 8, "no admission was made in one go"  # a small pool: fewer victims than pages
    for m in ms:
        m.check_integrity()
        m.close()


def big_writes(twin: Twins, rng: random.Random, i: int, seqs: list[str]) -> None:
    """A sequence registered with 16 to 30 pages (prefixes shared with earlier ones), or extended."""
    if seqs and rng.random() < 0.3:
        sid = rng.choice(seqs)
        new = [rng.randrange(50) for _ in range(rng.randrange(64, 120))]
        twin.do(lambda m, _: m.append(sid, new))
        return
    sid = f"w{i}"
    head = toks(1000 * rng.randrange(1, 4), rng.randrange(8, 40)) + toks(10_000 * (i + 1), rng.randrange(64, 120))
    twin.do(lambda m, _: m.register(sid, head))
    seqs.append(sid)


@pytest.mark.parametrize("seed,fire_from", [(8, 16), (9, 16), (8, poolbatch.FIRE_FROM)])
def test_many_victims_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, fire_from: int) -> None:
    """Writes of many pages against a full pool (the evictions one vector batch from ``fire_from`` pages,
    each alone in the batch's transaction below; victims whose collection forgets their ancestors too)
    against one page at a time."""
    monkeypatch.setattr(poolbatch, "FIRE_FROM", fire_from)
    done = counting(monkeypatch)
    ms, twin = twins(tmp_path, gpu_pages=160, host_pages=32, pool_capacity=40)
    rng = random.Random(seed)
    drive(twin, rng, 24, policy_state, write=big_writes, share=1, keep=2)
    assert max(done) >= 16, "no batch of evictions of 16 pages"
    assert poolbatch.fire_from() == fire_from
    for m in ms:
        m.check_integrity()
        m.close()


def test_a_refused_batch_leaves_it_to_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec whose admission refuses the pages at depth 5: a batch that meets one is undone (its refusal
    uncounted) and the pages go one at a time, with the same outcome, refusals included."""
    guard = "complete_morphology(p) and tier[p] == 'gpu' and depth[p] != 5 and " \
            "sum(1 if pool[q] == 'pooled' else 0 for q in pages) < CAPACITY"
    spec = spec_variant(tmp_path, {"objects.pool.events.admit.guard": guard})
    done = counting(monkeypatch)
    ms, twin = twins(tmp_path, spec)
    tried: list[int] = []
    rng = random.Random(5)
    seqs: list[str] = []
    for i in range(50):
        long_writes(twin, rng, i, seqs)
        tried.append(ms[0].metrics().events_refused.get("admit", 0))
        assert policy_state(ms[0]) == policy_state(ms[1])
        if len(seqs) > 3:
            sid = seqs.pop(0)
            twin.do(lambda m, _: m.free(sid))  # noqa: B023 - called at once
    assert tried[-1] > 0, "no admission was refused"
    assert done, "no admission was made in one go"
    for m in ms:
        m.check_integrity()
        m.close()


def test_batched_admissions_conform(monkeypatch: pytest.MonkeyPatch) -> None:
    done = counting(monkeypatch)
    opts = {**INSTANCE, "gpu_pages": 24, "disk_pages": 0, "pool_capacity": 6}
    m = CacheManager(config=RuntimeConfig(**opts, record=True))
    m.register("a", toks(0, 12))  # 6 pages: the pool full
    m.free("a")
    m.register("b", toks(100, 12))  # 6 pages, each evicting one of the pool (then forgotten)
    assert done == [6]
    steps = m.steps()
    assert {"evict", "admit", "forget"} <= {s.event for s in steps}
    assert check_all(m, steps) == []
    m.check_integrity()
    m.close()


def test_shape_the_batch_needs(tmp_path: Path) -> None:
    """An eviction that reads other pages' state (here, every page's pins) is not batched."""
    m = CacheManager(config=small_config(disk_pages=0))
    assert exact_in_one_go(m.parts.cspec) and m.parts.morph.batchable
    guard = "pin[p] == 0 and all(pin[q] < MAX_PIN for q in pages)"
    spec = spec_variant(tmp_path, {"objects.pool.events.evict.guard": guard})
    other = CacheManager(spec, config=small_config(disk_pages=0))
    assert not other.parts.morph.batchable
    for mm in (m, other):
        mm.close()


@pytest.mark.parametrize("pages", [1, 3, 20])
def test_a_pinned_victim_leaves_it_to_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    pages: int) -> None:
    """A pooled page a lease pins first among the policy's proposals: the batch's ``evict`` refuses it
    (the victims are not checked against the spec before), nothing is kept and one at a time skips it
    (its refusal counted and reported to the policy), with the same outcome as never batching."""
    done = counting(monkeypatch)
    ms, twin = twins(tmp_path, gpu_pages=80, host_pages=8, pool_capacity=24)
    one = toks(5000, 4)
    twin.do(lambda m, _: m.register("a", one))  # one page, pooled
    twin.do(lambda m, _: m.free("a"))
    leases = [m.lookup([*one, 1], owner="reader") for m in ms]  # pinned (and touched: last in the pool)
    twin.do(lambda m, _: m.register("old", toks(6000, 4 * 23)))  # 23 pages after it: the pool full
    assert policy_state(ms[0]) == policy_state(ms[1])
    twin.do(lambda m, _: m.register("new", toks(9000, 4 * pages)))  # the pinned page proposed first
    assert policy_state(ms[0]) == policy_state(ms[1])
    assert ms[0].metrics().policy_refusals > 0, "the pinned page was never proposed"
    assert not done, "a batch past a pinned victim"
    for m, got in zip(ms, leases, strict=True):
        assert isinstance(got, Ready)
        m.release(got.lease)
    twin.do(lambda m, _: m.register("more", toks(20_000, 4 * 20)))  # unpinned: in one go again
    assert policy_state(ms[0]) == policy_state(ms[1])
    assert done, "no admission was made in one go"
    for m in ms:
        m.check_integrity()
        m.close()
