"""A recovery that waits carries out its copies on its own thread (``Prefetcher.inline_copies``), each
as a worker would: against the same recoveries handing every copy to the (one) worker, on the same
random workloads, both managers must give the same answers and reports (refusals included) and hold
identical state and policy counts after every operation; so must a recovery whose plan's morphology
is proposed together and whose landed pages' moves are told together, against page by page.  The
recorded steps of recoveries that copy on their own thread conform (the step checker replays them)."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import small_config, toks
from test_runtime_conformance import INSTANCE, check_all
from test_runtime_differential import step
from test_runtime_roombatch import Twins, policy_counts

from morphcache.runtime import CacheManager, NeedsRecovery, Ready, RuntimeConfig
from morphcache.testing import diskdamage


def _recovering(twin: Twins, rng: random.Random, i: int, prompts: list[list[int]]) -> None:
    """A cached prompt looked up and recovered (its pages pushed off the GPU by other writes before)."""
    prompt = rng.choice(prompts)
    outs = twin.do(lambda m, _: m.lookup(prompt))
    if outs[0][0] == "ok" and isinstance(outs[0][1], NeedsRecovery):
        twin.do(lambda m, k: m.recover(outs[k][1].plan))
    elif outs[0][0] == "ok" and isinstance(outs[0][1], Ready):
        twin.do(lambda m, k: m.release(outs[k][1].lease))
    if rng.random() < 0.3:
        sid = f"p{i}"
        twin.do(lambda m, _: m.register(sid, prompt))
        twin.do(lambda m, _: m.free(sid))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_copies_on_the_recovery_thread_are_copies_by_the_worker(tmp_path: Path, seed: int) -> None:
    """Every copy of a recovery on its own thread against every copy by the one worker (both land in
    queue order; a share on each thread would land in either order, as two workers' do)."""
    ms = [CacheManager(config=small_config(tmp_path / name, gpu_pages=16, host_pages=10, disk_pages=64,
                                           pool_capacity=60, prefetch_workers=1)) for name in ("inline", "worker")]
    ms[0].parts.prefetcher.inline_copies = 1000
    ms[1].parts.prefetcher.inline_copies = 0
    twin = Twins(ms[0], ms[1])
    rng = random.Random(seed)
    prompts = [toks(1000 * (j + 1), rng.randrange(24, 56)) for j in range(3)]
    _drive(twin, ms, rng, prompts, 60, 0.75)
    fired = [m.metrics().events_fired for m in ms]
    assert fired[0] == fired[1] and fired[0]["land"] > 0, "no copy landed"
    for m in ms:
        m.check_integrity()
        m.close()


def _drive(twin: Twins, ms: list[CacheManager], rng: random.Random, prompts: list[list[int]], rounds: int,
           recovering_below: float, before: Callable[[], None] | None = None) -> None:
    """``rounds`` random operations on both twins (``before`` first in each): a write that pushes cached
    pages off the GPU, a recovering request (below ``recovering_below``) or another step; the policies'
    counts compared after each."""
    seqs: list[str] = []
    for i in range(rounds):
        if before is not None:
            before()
        r = rng.random()
        if r < 0.35:  # another write pushes cached pages off the GPU
            sid, other = f"w{i}", toks(50_000 + 100 * i, rng.randrange(16, 48))
            twin.do(lambda m, _: m.register(sid, other))  # noqa: B023 - called at once
            twin.do(lambda m, _: m.free(sid))  # noqa: B023
        elif r < recovering_below:
            _recovering(twin, rng, i, prompts)
        else:
            step(twin, rng, i, seqs)
        assert policy_counts(ms[0]) == policy_counts(ms[1])


@pytest.mark.parametrize("seed,pool", [(4, 60), (8, 40)])
def test_a_recovery_together_is_a_recovery_page_by_page(tmp_path: Path, seed: int, pool: int) -> None:
    """A recovery proposes the morphology of its plan's pages on the GPU together
    (``Morphology.maintain_many``) and tells the policy its landed pages' moves together against page
    by page (``Recovery.together_from``, ``Landing.batched`` off), on the same random workloads, a small
    reuse pool making the admissions evict, disk records damaged now and then (their copies do not
    land): the same answers, reports, state and policy counts after every operation."""
    ms = [CacheManager(config=small_config(tmp_path / name, gpu_pages=40, host_pages=10, disk_pages=12,
                                           pool_capacity=pool, prefetch_workers=1)) for name in ("together", "alone")]
    ms[0].parts.recovery.together_from = 1
    ms[1].parts.recovery.together_from = 1 << 30
    ms[1].parts.prefetcher.landing.batched = False
    twin = Twins(ms[0], ms[1])
    rng = random.Random(seed)
    prompts = [toks(1000 * (j + 1), rng.randrange(40, 110)) for j in range(3)]

    def damage() -> None:
        on_disk = sorted(ms[0].disk.pages)
        if on_disk and rng.random() < 0.3:  # the same page's record damaged on both
            victim = rng.choice(on_disk)
            for m in ms:
                diskdamage.flip(m.disk, victim, (-3,), 0x20)

    _drive(twin, ms, rng, prompts, 50, 0.8, before=damage)
    fired = [m.metrics().events_fired for m in ms]
    assert fired[0] == fired[1] and fired[0]["land"] > 0 and fired[0]["recompute"] > 0
    assert fired[0]["evict"] > 0 and fired[0]["corrupt"] > 0, "no admission evicted or no copy refused"
    for m in ms:
        m.check_integrity()
        m.close()


def test_copies_on_the_recovery_thread_conform(tmp_path: Path) -> None:
    opts: dict[str, Any] = {**INSTANCE, "gpu_pages": 8, "host_pages": 6, "disk_pages": 8, "pool_capacity": 8}
    m = CacheManager(config=RuntimeConfig(**opts, disk_dir=str(tmp_path / "disk"), record=True))
    m.register("a", toks(0, 8))
    m.free("a")
    for pid in m.cached_pages()[:3]:
        m.offload(pid, "host")
    m.offload(m.cached_pages()[3], "disk")
    res = m.lookup(toks(0, 8))
    assert isinstance(res, NeedsRecovery) and len(res.plan.pages_on("prefetch")) == 4
    m.parts.prefetcher.executor.shutdown()  # every copy on the recovery's own thread
    report = m.recover(res.plan)
    assert not report.failed and report.prefetched == 4
    steps = m.steps()
    assert [s.event for s in steps].count("land") == 4
    assert check_all(m, steps) == []
    assert isinstance(m.lookup(toks(0, 8)), Ready)
    m.check_integrity()
    m.close()


def test_a_refused_copy_or_recompute_with_a_free_slot_gives_it_back(
        make_manager: Callable[..., CacheManager]) -> None:
    """With a slot free, a recovery's prefetch and recompute take it and let the firing decide: a refusal
    (a captured reader holds the page) gives it back, counted once, nothing else changed."""
    m = make_manager(host_pages=8)
    m.register("a", toks(0, 12))
    first, second = m.sequence_pages("a")[:2]
    m.capture(["a"])
    m.offload(first, "host")
    m.drop(second)
    slots = m.parts.storage.slots
    free = list(slots.free_slots)
    assert free
    res = m.lookup(toks(0, 12))
    assert isinstance(res, NeedsRecovery)
    assert res.plan.pages_on("prefetch") == (first,) and res.plan.pages_on("recompute") == (second,)
    report = m.recover(res.plan)
    assert [pid for pid, _ in report.failed] == [first, second] and report.prefetched == 0
    assert all("graph[s]='captured'" in why for _, why in report.failed), report.failed
    assert slots.free_slots == free
    assert m.page_state(first)["tier"] == "host" and m.page_state(second)["tier"] == "dropped"
    refused = m.metrics().events_refused
    assert refused["prefetch"] == 1 and refused["recompute"] == 1
    m.uncapture(["a"])
    m.check_integrity()
