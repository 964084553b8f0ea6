"""The soak, short: the runtime under disk faults, aborts, captures and tier moves, single-threaded and
with three request threads beside a chaos thread.  Every read holds the bytes its lookup promised,
nothing raises outside its documented errors, integrity holds (also with copies in flight), every
damaged file a read met was detected, no failed move lost its page.  On a spec that lands copies
without verifying them, the same soak reports the faults it let through."""

from __future__ import annotations

from pathlib import Path

from rt_helpers import spec_variant

from morphcache.testing.soak import SoakConfig, SoakResult, run_soak


def _assert_clean(r: SoakResult) -> None:
    assert r.ok, (r.failures, r.problems)
    assert r.reads_checked > 100 and sum(r.faults_injected.values()) > 20 and r.faults_reached > 0, r.counts
    assert r.faults_detected == r.faults_reached


def test_soak_single_threaded() -> None:
    _assert_clean(run_soak(SoakConfig(seconds=0, min_steps=6000, seed=11)))


def test_soak_request_threads_beside_a_chaos_thread() -> None:
    _assert_clean(run_soak(SoakConfig(seconds=0, min_steps=1200, seed=12, threads=3)))


def test_soak_reports_faults_a_spec_without_verification_lets_through(tmp_path: Path) -> None:
    weak = spec_variant(tmp_path, {"objects.tier.events.land.guard": "copied[p]",
                                   "predicates.resident.expr": "tier[p] == 'gpu' and copied[p]"})
    r = run_soak(SoakConfig(seconds=0, min_steps=1500, seed=13, spec=str(weak)))
    assert r.faults_reached > 0 and r.faults_detected == 0, r.counts  # damaged copies landed, none found corrupt
    assert not r.ok and r.failures["undetected_faults"] == 1, (r.failures, r.problems)  # one report: the totals
