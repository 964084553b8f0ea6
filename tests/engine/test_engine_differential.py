"""Differential tests: a random workload that walks every cache path, served through the runtime and
the kernels, against the golden forward; and the same workload in the unsafe hash-only mode, where
the test asserts that the drift is found."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from eng_helpers import TOL, C, RunLog, chaos_workload, make_engine, random_workload, run_workload

from morphcache.engine import Engine
from morphcache.model import HybridModel
from morphcache.runtime import MetricsSnapshot, MorphcacheError

SEED = 1


@pytest.fixture(scope="module")
def guarded(model: HybridModel, tmp_path_factory: pytest.TempPathFactory) -> tuple[RunLog, MetricsSnapshot, Engine]:
    engine = make_engine(model, tmp_path_factory.mktemp("guarded"))
    try:
        log = run_workload(engine, chaos_workload(SEED))
        return log, engine.manager.metrics(), engine
    finally:
        engine.close()


@pytest.fixture(scope="module")
def unsafe(model: HybridModel, tmp_path_factory: pytest.TempPathFactory) -> RunLog:
    engine = make_engine(model, tmp_path_factory.mktemp("unsafe"), unsafe=True)
    try:
        return run_workload(engine, chaos_workload(SEED))
    finally:
        engine.close()


def test_every_request_matches_the_golden_forward(guarded: tuple[RunLog, MetricsSnapshot, Engine]) -> None:
    log, _, _ = guarded
    assert len(log.diffs) == 8
    assert max(log.diffs) <= TOL, log.diffs


def test_the_workload_walks_every_path(guarded: tuple[RunLog, MetricsSnapshot, Engine]) -> None:
    log, metrics, engine = guarded
    reports = [r.report for r in log.results]
    assert len(log.applied) == 5  # every chaos action found its page
    paths: Counter[str] = Counter()
    gaps: Counter[str] = Counter()
    for rep in reports:
        paths.update(rep.recoveries)
        gaps.update(rep.gap_by_object)
    assert paths["prefetch"] >= 3 and paths["compress"] >= 1 and paths["recompute"] >= 2, paths
    assert {"tier", "window", "indexer"} <= set(gaps), gaps
    assert sum(rep.corrupt_pages for rep in reports) == 1
    assert sum(rep.rebuilt_pages for rep in reports) >= 1
    assert any(rep.reused % C for rep in reports), "a hit in the middle of a page"
    assert any(0 < rep.reused < rep.nominal for rep in reports), "a hit cut back to its readable part"
    assert reports[0].nominal == 0 and reports[5].nominal == 0  # misses
    assert reports[6].nominal > 0 and reports[6].reused == 0  # windows slid out
    assert reports[-1].reused >= reports[4].prompt_tokens - C  # the rebuilt chain is reused whole
    assert any(rep.decoded for rep in reports)
    moved = metrics.bytes_moved
    assert all(moved.get(k, 0) > 0 for k in ("gpu->host", "host->disk", "host->gpu", "disk->gpu")), moved
    fired = metrics.events_fired
    assert fired["offload"] > 4, "offloads under memory pressure, beyond the chaos actions"
    assert fired["evict"] >= 1 and fired["slide"] >= 1 and fired["recompute"] >= 1
    gens = []
    for r in log.results:
        for pid in r.pages:
            try:
                gens.append(int(engine.manager.page_state(pid)["gen"]))
            except MorphcacheError:
                pass
    assert max(gens) >= 2, "generations bumped by offload and landing"


def test_unsafe_hash_only_mode_drifts(unsafe: RunLog, guarded: tuple[RunLog, MetricsSnapshot, Engine]) -> None:
    glog = guarded[0]
    drifted = [i for i, d in enumerate(unsafe.diffs) if not d <= TOL]
    assert drifted, f"the unsafe mode found no drift: {unsafe.diffs}"
    assert max(unsafe.diffs) > 100 * TOL
    claimed = sum(r.report.reused for r in unsafe.results)
    assert claimed > sum(r.report.reused for r in glog.results)  # it trusts every nominal hit
    for i in drifted:  # drift only where the guarded runtime saw a nominal hit it could not read
        g = glog.results[i].report
        assert g.nominal > g.effective, (i, g)


def test_reference_ops_serve_the_same_workload(model: HybridModel, tmp_path: Path) -> None:
    engine = make_engine(model, tmp_path, ops="reference")
    try:
        log = run_workload(engine, chaos_workload(SEED + 1))
    finally:
        engine.close()
    assert max(log.diffs) <= TOL, log.diffs
    assert engine.ops.name == "reference"


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_workloads_with_reference_ops(model: HybridModel, tmp_path: Path, seed: int) -> None:
    engine = make_engine(model, tmp_path, ops="reference", gpu_pages=12, host_pages=4, disk_pages=6)
    try:
        log = run_workload(engine, random_workload(seed, 30))
    finally:
        engine.close()
    assert max(log.diffs) <= TOL, log.diffs
    assert sum(r.report.reused for r in log.results) > 0


def test_the_gap_between_nominal_and_effective_hits_is_exact(model: HybridModel) -> None:
    """A prompt of three whole pages and five tokens is served, its three cached pages are offloaded to
    the host, and it is served again: the second lookup's nominal hit is those three pages (3 * C
    tokens; the partial page was forgotten with its sequence), none of them readable on the GPU.  The
    gap is exactly 3 * C tokens, all charged to the tier; an engine that took nominal hits as readable
    would report none."""
    engine = make_engine(model, None, ops="reference")
    try:
        prompt = [int(t) for t in torch.randint(0, 256, (3 * C + 5,), generator=torch.Generator().manual_seed(4))]
        first = engine.serve(prompt)
        for pid in first.pages[:3]:
            engine.manager.offload(pid, "host")
        before = engine.manager.metrics()
        second = engine.serve(prompt + [1, 2])
        after = engine.manager.metrics()
    finally:
        engine.close()
    rep = second.report
    assert (rep.nominal, rep.effective, rep.gap_by_object) == (3 * C, 0, {"tier": 3 * C})
    assert after.gap_tokens - before.gap_tokens == 3 * C
    assert after.gap_tokens_by_object["tier"] - before.gap_tokens_by_object.get("tier", 0) == 3 * C
    assert rep.reused == 3 * C and engine.golden_diff(second) <= TOL  # prefetched back, then reused
