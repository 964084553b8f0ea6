"""Tiers: offload and prefetch round trips, pressure policies, atomic disk files, corrupted pages."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from rt_helpers import spec_variant, toks

from morphcache.runtime import (
    BadInputError,
    CacheManager,
    NeedsRecovery,
    Ready,
    RuntimeConfig,
    TierError,
    UnknownPageError,
    expected_payload,
)
from morphcache.testing import diskdamage
from morphcache.testing.diskdamage import records


def cached(m: CacheManager, n: int = 12) -> list[int]:
    """A freed sequence of ``n`` tokens: its whole pages are pooled and held by no sequence."""
    m.register("a", toks(0, n))
    pages = list(m.sequence_pages("a"))[: n // m.C]
    m.free("a")
    return pages


def read_all(m: CacheManager, n: int = 12) -> tuple[bytes, ...]:
    r = m.lookup(toks(0, n))
    if isinstance(r, NeedsRecovery):
        m.recover(r.plan)
        r = m.lookup(toks(0, n))
    assert isinstance(r, Ready) and r.lease.tokens == n, r
    view = m.read(r.lease, payloads=True)
    m.release(r.lease)
    assert view.payloads is not None
    return view.payloads


def expected(n: int = 12) -> tuple[bytes, ...]:
    return tuple(expected_payload(toks(4 * p, 4), p, 4) for p in range(n // 4))


def test_round_trip_through_host_and_disk(mgr: CacheManager) -> None:
    pages = cached(mgr)
    mgr.offload(pages[0], "host")
    mgr.offload(pages[1], "disk")
    assert [mgr.page_state(p)["tier"] for p in pages] == ["host", "disk", "gpu"]
    assert mgr.disk is not None and list(records(mgr.disk).values()) == [pages[1]]
    assert sorted(os.listdir(mgr.disk.dir)) == [".lock", "pages.slab"]
    mgr.check_integrity()
    for pid in pages[:2]:
        mgr.prefetch(pid).result()
    assert [mgr.page_state(p)["tier"] for p in pages] == ["gpu"] * 3
    assert records(mgr.disk) == {}  # the record cleared once its page landed
    assert read_all(mgr) == expected()
    mgr.check_integrity()


def test_gpu_pressure_moves_cold_pages_down_the_tiers(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(gpu_pages=4, host_pages=2, disk_pages=3, pool_capacity=16)
    for i in range(6):
        m.register(f"s{i}", toks(100 * i, 8))
        m.free(f"s{i}")
        m.check_integrity()
    tiers = [m.page_state(p)["tier"] for p in m.page_ids()]
    assert tiers.count("gpu") <= 4 and tiers.count("host") <= 2 and tiers.count("disk") <= 3
    assert m.metrics().bytes_moved["host->disk"] > 0
    r = m.lookup(toks(0, 8))  # the oldest prefix went down the tiers (or was dropped)
    assert not isinstance(r, Ready)


def test_page_values_say_what_page_state_says(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(gpu_pages=4, host_pages=2, disk_pages=3, pool_capacity=16)
    for i in range(6):
        m.register(f"s{i}", toks(100 * i, 8 + i % 3))
        if i < 5:
            m.free(f"s{i}")
    pids = list(reversed(m.page_ids()))
    names = ("tier", "gen", "tail", "compressed", "window", "pool", "verified", "gpu_slot")
    got = m.page_values(pids, names)
    assert {name: [m.page_state(p)[name] for p in pids] for name in names} == got
    assert set(got["tier"]) >= {"gpu", "host"}  # pages on several tiers compared
    assert m.page_values([], ("gen",)) == {"gen": []}
    with pytest.raises(UnknownPageError):
        m.page_values([pids[0], 10_000], ("gen",))
    with pytest.raises(BadInputError, match="no page value named 'colour'"):
        m.page_values(pids, ("colour",))


@pytest.mark.parametrize("damage", ["bitflip", "truncate", "delete"])
def test_corrupt_disk_page_goes_to_recompute(mgr: CacheManager, damage: str) -> None:
    pages = cached(mgr)
    mgr.offload(pages[1], "disk")
    assert mgr.disk is not None
    if damage == "bitflip":
        diskdamage.flip(mgr.disk, pages[1], (-5,), 0x10)
    elif damage == "truncate":
        diskdamage.truncate(mgr.disk, pages[1], 7)
    else:
        diskdamage.delete(mgr.disk, pages[1])
    mgr.prefetch(pages[1]).result()
    assert mgr.page_state(pages[1])["tier"] == "dropped"
    reason = {"bitflip": "checksum", "truncate": "truncated", "delete": "missing"}[damage]
    assert mgr.metrics().corrupt_pages == {reason: 1}
    r = mgr.lookup(toks(0, 12))
    assert isinstance(r, NeedsRecovery)
    assert {a.path for a in r.plan.assignments if a.page == pages[1]} == {"recompute"}
    assert read_all(mgr) == expected()  # recomputed, never read from the damaged file
    mgr.check_integrity()


def corrupted_read_scenario(m: CacheManager) -> None:
    """Flip a bit of a page on disk, prefetch it, read the prefix: no read may see damaged bytes."""
    pages = cached(m)
    m.offload(pages[1], "disk")
    assert m.disk is not None
    diskdamage.flip(m.disk, pages[1], (-1,), 0x01)
    m.prefetch(pages[1]).result()
    assert read_all(m) == expected(), "a read returned the bytes of a corrupted page"


def test_corruption_scenario_fails_on_a_spec_without_verification(
        tmp_path: Path, make_manager: Callable[..., CacheManager]) -> None:
    corrupted_read_scenario(make_manager())
    weak = spec_variant(tmp_path, {"objects.tier.events.land.guard": "copied[p]",
                                   "predicates.resident.expr": "tier[p] == 'gpu' and copied[p]"})
    with pytest.raises(AssertionError, match="corrupted page"):
        corrupted_read_scenario(make_manager(weak))


def test_unwritable_disk_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(TierError, match="not writable"):
        CacheManager(config=RuntimeConfig(page_size=4, disk_dir=str(blocker / "sub"), disk_pages=4))


def test_offload_refuses_a_filling_page(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 6))
    from morphcache.runtime import GuardRefused

    with pytest.raises(GuardRefused, match="tail"):
        mgr.offload(mgr.sequence_pages("a")[1])
    mgr.check_integrity()
