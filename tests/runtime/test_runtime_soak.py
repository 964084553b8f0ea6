"""The soak, short: the runtime under disk faults, aborts, captures and tier moves, single-threaded and
with three request threads beside a chaos thread.  Every read holds the bytes its lookup promised,
nothing raises outside its documented errors, integrity holds (also with copies in flight), every
damaged file a read met was detected, no failed move lost its page.  On a spec that lands copies
without verifying them, the same soak reports the faults it let through."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from rt_helpers import small_config, spec_variant, toks

from morphcache.runtime import CacheManager, RuntimeConfig, TierError
from morphcache.testing.soak import SoakConfig, SoakResult, run_soak
from morphcache.testing.soak_faults import FaultInjector
from morphcache.testing.soak_oracle import Tally, check_lease


def _assert_clean(r: SoakResult) -> None:
    assert r.ok, (r.failures, r.problems)
    assert r.reads_checked > 100 and sum(r.faults_injected.values()) > 20 and r.faults_reached > 0, r.counts
    assert r.faults_detected == r.faults_reached


def test_soak_single_threaded() -> None:
    _assert_clean(run_soak(SoakConfig(seconds=0, min_steps=6000, seed=11)))


def test_soak_request_threads_beside_a_chaos_thread() -> None:
    _assert_clean(run_soak(SoakConfig(seconds=0, min_steps=1000, seed=12, threads=3)))


def test_soak_reports_faults_a_spec_without_verification_lets_through(tmp_path: Path) -> None:
    weak = spec_variant(tmp_path, {"objects.tier.events.land.guard": "copied[p]",
                                   "predicates.resident.expr": "tier[p] == 'gpu' and copied[p]"})
    r = run_soak(SoakConfig(seconds=0, min_steps=1500, seed=13, spec=str(weak)))
    assert r.faults_reached > 0 and r.faults_detected == 0, r.counts  # damaged copies landed, none found corrupt
    assert not r.ok and r.failures["undetected_faults"] == 1, (r.failures, r.problems)  # one report: the totals


def test_the_oracle_sees_a_wrong_byte_in_a_read_and_in_a_kernel_row() -> None:
    m = CacheManager(config=RuntimeConfig(page_size=4, window=64, gpu_pages=8))
    m.register("a", toks(0, 10))
    lease = m.acquire("a")
    tally = Tally()
    check_lease(m, tally, lease, toks(0, 10))
    assert tally.counts["reads_checked"] == 2 and tally.counts["wrong_reads"] == 0
    slot = m.page_state(lease.pinned[2])["gpu_slot"]  # the partial last page: 2 tokens of 4 are compared
    data = bytearray(m.store.read(slot))  # type: ignore[attr-defined]
    data[9] ^= 1
    m.store.write(slot, bytes(data))  # type: ignore[attr-defined]
    check_lease(m, tally, lease, toks(0, 10))
    assert tally.counts["wrong_reads"] == 2, tally.problems  # the read's payload and the kernel row
    data[9] ^= 1
    data[-1] ^= 1  # beyond the two tokens the lease covers: not the lease's bytes
    m.store.write(slot, bytes(data))  # type: ignore[attr-defined]
    check_lease(m, tally, lease, toks(0, 10))
    assert tally.counts["wrong_reads"] == 2
    m.close()


def test_a_damaged_file_a_prefetch_reads_is_counted_as_reached_and_detected(tmp_path: Path) -> None:
    m = CacheManager(config=small_config(tmp_path))
    faults = FaultInjector(m, random.Random(0))
    m.register("a", toks(0, 8))
    m.free("a")
    pid = m.cached_pages()[0]
    m.offload(pid, "disk")
    assert faults.damage_file() in ("bitflip", "truncate", "delete") and faults.faults_reached == 0
    m.prefetch(pid).result()
    assert faults.faults_reached == 1 and sum(m.metrics().corrupt_pages.values()) == 1
    assert m.page_state(pid)["tier"] == "dropped"
    faults.toggle_writes()
    m.register("b", toks(100, 8))
    m.free("b")
    with pytest.raises(TierError):
        m.offload(m.cached_pages()[-1], "disk")
    assert faults.writes_refused == 1
    faults.heal()
    m.close()
