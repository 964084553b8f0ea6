"""Leases: pins, read-time re-validation, release, refusals of pinned pages, the kernel lease."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from rt_helpers import spec_variant, toks

from morphcache.kernels.lease import KernelLease, require_live_lease
from morphcache.runtime import (
    CacheManager,
    ForeignLeaseError,
    GuardRefused,
    LeaseReleasedError,
    PinnedPageError,
    Ready,
    StaleLeaseError,
    expected_payload,
)


def ready(m: CacheManager, tokens: list[int]) -> Ready:
    r = m.lookup(tokens)
    assert isinstance(r, Ready), r
    return r


def test_read_validates_and_returns_the_payloads(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    lease = ready(mgr, toks(0, 8)).lease
    view = mgr.read(lease, payloads=True)
    assert view.generations == lease.generations
    assert view.payloads == (expected_payload(toks(0, 4), 0, 4), expected_payload(toks(4, 4), 1, 4))
    mgr.release(lease)
    with pytest.raises(LeaseReleasedError):
        mgr.release(lease)
    with pytest.raises(LeaseReleasedError):
        mgr.read(lease)
    mgr.check_integrity()


def test_pinned_pages_refuse_every_move(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    lease = ready(mgr, toks(0, 8)).lease
    pid = lease.pages[0]
    for op in (lambda: mgr.offload(pid), lambda: mgr.offload(pid, "disk"), lambda: mgr.drop(pid),
               lambda: mgr.evict(pid), lambda: mgr.recompress(pid)):
        with pytest.raises(PinnedPageError) as exc:
            op()
        assert exc.value.page == pid and "pin[p] == 0" in exc.value.failed
    mgr.check_integrity()
    mgr.free("a")
    assert pid in mgr.page_ids()  # pinned (and pooled): still there
    mgr.release(lease)
    mgr.check_integrity()


def test_pinned_private_page_outlives_its_sequence(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(auto_admit=False)
    m.register("a", toks(0, 9))
    lease = m.acquire("a")
    pages = m.sequence_pages("a")
    m.free("a")
    assert all(p in m.page_ids() for p in lease.pages) and pages[2] in m.page_ids()  # the tail is pinned too
    m.check_integrity()
    m.release(lease)
    assert not m.page_ids()
    m.check_integrity()


def test_lease_from_another_manager_is_foreign(make_manager: Callable[..., CacheManager]) -> None:
    a, b = make_manager(), make_manager()
    a.register("x", toks(0, 8))
    b.register("x", toks(0, 8))
    lease = ready(a, toks(0, 8)).lease
    with pytest.raises(ForeignLeaseError):
        b.release(lease)
    with pytest.raises(ForeignLeaseError):
        b.read(lease)
    a.release(lease)
    a.check_integrity()
    b.check_integrity()


def test_max_pin_refuses_a_further_lease(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(max_pin=2)
    m.register("a", toks(0, 9))
    leases = [ready(m, toks(0, 8)).lease for _ in range(2)]
    with pytest.raises(GuardRefused, match="MAX_PIN"):
        m.lookup(toks(0, 8))
    assert [m.page_state(p)["pin"] for p in leases[0].pages] == [2, 2]
    for lease in leases:
        m.release(lease)
    m.check_integrity()


def test_read_catches_what_a_weakened_offload_let_through(tmp_path: Path,
                                                          make_manager: Callable[..., CacheManager]) -> None:
    """With the pin check removed from offload, a leased page can leave the GPU; the read-time
    re-validation (generation and readiness) still refuses to read it."""
    weak = spec_variant(tmp_path, {"objects.tier.events.offload.guard":
                                   "tail[p] in {'sealed', 'released'} and compressed[p] != 'building'"})
    m = make_manager(weak)
    m.register("a", toks(0, 9))
    lease = ready(m, toks(0, 8)).lease
    m.offload(lease.pages[1])
    with pytest.raises(StaleLeaseError, match="failed re-validation"):
        m.read(lease)
    m.release(lease)


def test_kernel_lease_rows(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 10))
    mgr.register("b", toks(100, 5))
    la = ready(mgr, toks(0, 8)).lease
    lb = mgr.acquire("b")  # one whole page + its filling page
    kl = mgr.kernel_lease([la, lb])
    assert isinstance(kl, KernelLease)
    slots_a = [mgr.page_state(p)["gpu_slot"] for p in la.pages]
    slots_b = [mgr.page_state(p)["gpu_slot"] for p in mgr.sequence_pages("b")]
    assert kl.block_table.tolist() == [slots_a, slots_b]
    assert kl.block_table.dtype == torch.int32 and kl.lease_generations.shape == (2, 2)
    assert kl.seq_lens.tolist() == [8, 5]
    assert require_live_lease(kl, "test") is kl
    mgr.release(la)
    with pytest.raises(LeaseReleasedError):
        require_live_lease(kl, "test")
    mgr.release(lb)
    mgr.check_integrity()
