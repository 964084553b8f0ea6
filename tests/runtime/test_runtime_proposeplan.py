"""A sealed page's proposals as one generated function (proposeplan.py) against the same proposals
made one by one: the same random workloads on two managers, one of them never generating it; after
every operation both must have given the same answer (or refusal) and hold identical state, the
policy's included.  Spec variants refuse a proposal mid-way (a guard) and put an effect out of its
bounds (refused and counted, the next event still proposed)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import small_config, spec_variant
from test_runtime_poolbatch import big_writes, policy_state
from test_runtime_roombatch import Twins, drive

from morphcache.runtime import CacheManager
from morphcache.runtime import pipeline as pipeline_module
from morphcache.runtime.morphology import MAINTAIN


def twins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: Path | None = None,
          **overrides: Any) -> tuple[list[CacheManager], Twins, list[int]]:
    """Two managers, the second proposing one by one; the count of generated plans built."""
    opts = dict(gpu_pages=40, host_pages=8, disk_pages=64, pool_capacity=10, prefetch_workers=1)
    opts.update(overrides)
    ms = [CacheManager(spec, config=small_config(tmp_path / name, **opts)) for name in ("generated", "single")]
    built: list[int] = []
    real = pipeline_module.build_proposals

    def build(pipe: Any, *args: Any) -> Any:
        if pipe is ms[1].parts.pipe:
            return None
        found = real(pipe, *args)
        built.append(found is not None)
        return found

    monkeypatch.setattr(pipeline_module, "build_proposals", build)
    return ms, Twins(ms[0], ms[1]), built


def proposals_made(m: CacheManager) -> tuple[Any, ...]:
    """The firings and refusals counted (the proposals' included) and the policy's state."""
    snap = m.metrics()
    return dict(snap.events_fired), dict(snap.events_refused), policy_state(m)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_proposals_are_proposals_one_by_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      seed: int) -> None:
    ms, twin, built = twins(tmp_path, monkeypatch)
    drive(twin, random.Random(seed), 60, proposals_made)
    assert built and all(built), "no generated plan"
    for m in ms:
        m.check_integrity()
        m.close()


def test_big_writes_against_a_full_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ms, twin, built = twins(tmp_path, monkeypatch, gpu_pages=160, host_pages=32, pool_capacity=40)
    drive(twin, random.Random(7), 20, proposals_made, write=big_writes, share=1, keep=2)
    assert built and all(built)
    for m in ms:
        m.check_integrity()
        m.close()


@pytest.mark.parametrize("edits", [
    {"objects.compressed.events.finish_compress.guard": "tier[p] == 'gpu' and depth[p] % 3 != 1"},
    {"objects.compressed.vars.cgen.max": 0},
], ids=["refused-mid-way", "out-of-bounds"])
def test_refusals_mid_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edits: dict[str, Any]) -> None:
    spec = spec_variant(tmp_path, edits)
    ms, twin, built = twins(tmp_path, monkeypatch, spec)
    drive(twin, random.Random(4), 40, proposals_made)
    assert built and all(built)
    refused = ms[0].metrics().events_refused
    assert "out-of-bounds" not in str(edits) or refused.get("finish_compress", 0) > 0
    for m in ms:
        m.check_integrity()
        m.close()


def test_the_plan_is_kept_and_rebuilt_after_a_watch() -> None:
    m = CacheManager(config=small_config())
    pipe, when, then = m.parts.pipe, {2: lambda p: True}, {0: lambda p: None}
    plan = pipe.proposals(MAINTAIN, when, then)
    assert pipe.proposals(MAINTAIN, when, then) is plan
    assert pipe.proposals(MAINTAIN, dict(when), then) is not plan  # other hooks: built for them
    plan = pipe.proposals(MAINTAIN, when, then)
    pipe.watch("cgen", lambda index: None)  # the plans call the watchers they saw when built
    assert pipe.proposals(MAINTAIN, when, then) is not plan
    m.close()
