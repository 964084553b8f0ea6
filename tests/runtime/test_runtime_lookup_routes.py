"""A plan's routes (``RecoveryPlan.routes``: the pages on the prefetch and the recompute paths, the
assignments counted by path) are made once, when the lookup counts the plan, and read again by the
recovery; they must be exactly what ``routes_of`` reads off the plan's assignments and what
``pages_on`` says (a copy of the plan makes its own, the same), the recovery's report counting the
same, on the fast path and the general one, on random workloads whose prompts are pushed off the GPU
and recovered."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from rt_helpers import small_config, toks

from morphcache.runtime import CacheManager, NeedsRecovery, Ready
from morphcache.runtime.plan import RecoveryPlan, routes_of


def _check(plan: RecoveryPlan) -> None:
    made = plan.__dict__.get("routes")
    assert made is not None, "the lookup counted the plan by its routes"
    want = routes_of(plan.assignments)
    assert made == want and dict(made.done) == dict(want.done) and list(made.done) == list(want.done)
    assert made.prefetch == plan.pages_on("prefetch") and made.recompute == plan.pages_on("recompute")
    assert plan.pages_to_prefetch == len(made.prefetch)
    again = dataclasses.replace(plan)  # (a copy computes its own: the same)
    assert "routes" not in again.__dict__ and again.routes == made


@pytest.mark.parametrize("seed,fast", [(1, True), (2, True), (3, False)])
def test_a_plans_routes_are_its_assignments_routes(tmp_path: Path, seed: int, fast: bool) -> None:
    m = CacheManager(config=small_config(tmp_path, gpu_pages=24, host_pages=12, disk_pages=48, pool_capacity=40,
                                         prefetch_workers=1, fast=fast))
    rng = random.Random(seed)
    prompts = [toks(1000 * (j + 1), rng.randrange(20, 60)) for j in range(4)]
    plans = 0
    for i in range(80):
        if rng.random() < 0.4:  # another write pushes cached pages off the GPU
            sid = f"w{i}"
            m.register(sid, toks(50_000 + 100 * i, rng.randrange(8, 40)))
            m.free(sid)
            continue
        prompt = rng.choice(prompts)
        res = m.lookup(prompt[:rng.randrange(4, len(prompt) + 1)])
        if isinstance(res, NeedsRecovery):
            _check(res.plan)
            plans += 1
            report = m.recover(res.plan)
            assert dict(report.done) == dict(res.plan.routes.done)
        elif isinstance(res, Ready):
            m.release(res.lease)
        if rng.random() < 0.5:
            sid = f"p{i}"
            m.register(sid, prompt)
            m.free(sid)
    assert plans > 0, "no lookup needed a recovery"
    m.check_integrity()
    m.close()
