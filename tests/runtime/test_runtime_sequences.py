"""Sequences: append opens, fills and seals pages; sealed pages are compressed, indexed, admitted;
windows slide; free releases; capture freezes the block table."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rt_helpers import toks

from morphcache.runtime import CacheManager, Ready, TopologyError, expected_payload


def states(m: CacheManager, pid: int, *names: str) -> tuple[object, ...]:
    st = m.page_state(pid)
    return tuple(st[n] for n in names)


def test_append_builds_complete_morphology(mgr: CacheManager) -> None:
    assert mgr.register("a", toks(0, 10)) == 10
    pages = mgr.sequence_pages("a")
    assert len(pages) == 3
    for pid in pages[:2]:
        assert states(mgr, pid, "tail", "compressed", "indexer", "tier", "pool") == (
            "sealed", "complete", "built", "gpu", "pooled")
    assert states(mgr, pages[2], "tail", "fill", "pool") == ("filling", 2, "private")
    assert mgr.store.read(mgr.page_state(pages[0])["gpu_slot"]) == expected_payload(toks(0, 4), 0, 4)  # type: ignore[attr-defined]
    mgr.check_integrity()


def test_windows_slide_behind_the_frontier(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 16))  # C=4, W=6: pages 0 and 1 end W tokens behind 16
    windows = [mgr.page_state(p)["window"] for p in mgr.sequence_pages("a")]
    assert windows == ["expired", "expired", "live", "live"]
    mgr.check_integrity()


def test_identical_content_is_found_by_the_chain(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 8))
    mgr.register("b", toks(0, 8))  # written independently: private duplicates of a's pages
    r = mgr.lookup(toks(0, 8))
    assert isinstance(r, Ready) and r.lease.pages == mgr.sequence_pages("a")[:2]
    mgr.release(r.lease)
    a = mgr.sequence_pages("a")
    mgr.free("a")
    mgr.evict(a[1])
    mgr.evict(a[0])  # forgotten: b's duplicates take over the index entries
    assert a[0] not in mgr.page_ids()
    r = mgr.lookup(toks(0, 8))
    assert isinstance(r, Ready) and r.lease.pages == mgr.sequence_pages("b")[:2]
    mgr.release(r.lease)
    mgr.check_integrity()


def test_free_keeps_pooled_pages_and_forgets_the_rest(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 10))
    pages = mgr.sequence_pages("a")
    mgr.free("a")
    assert set(mgr.pooled) == set(pages[:2])
    assert pages[2] not in mgr.page_ids()
    mgr.evict(pages[1])
    assert pages[1] not in mgr.page_ids() and pages[0] in mgr.page_ids()
    mgr.check_integrity()


def test_pool_capacity_evicts_least_recent(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(pool_capacity=2)
    m.register("a", toks(0, 8))
    m.free("a")
    m.register("b", toks(100, 8))
    assert len(m.pooled) == 2
    assert all(pid in m.sequence_pages("b") for pid in m.pooled)
    m.check_integrity()


def test_capture_freezes_block_count(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 6))
    mgr.capture(["a"])
    mgr.append("a", [6, 7])  # fills the current page: no new block
    with pytest.raises(TopologyError) as exc:
        mgr.append("a", [8])  # would open block 2
    assert exc.value.event == "open" and "graph[r] == 'idle'" in exc.value.failed
    assert mgr.frontier("a") == 8
    mgr.check_integrity()
    mgr.uncapture(["a"])
    mgr.append("a", [8])
    assert mgr.frontier("a") == 9
    mgr.check_integrity()


def test_capture_defers_prefetch_into_the_batch(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    pid = mgr.sequence_pages("a")[0]
    mgr.offload(pid)
    mgr.capture(["a"])
    with pytest.raises(TopologyError):
        mgr.prefetch(pid)
    mgr.uncapture(["a"])
    mgr.prefetch(pid).result()
    assert mgr.page_state(pid)["tier"] == "gpu"
    mgr.check_integrity()


def test_attach_shares_whole_pages_and_copies_the_partial_one(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 10))
    r = mgr.lookup(toks(0, 10) + [99])
    assert isinstance(r, Ready) and r.lease.tokens == 10 and r.lease.partial is not None
    mgr.register("b")
    assert mgr.attach("b", r.lease) == 10
    a, b = mgr.sequence_pages("a"), mgr.sequence_pages("b")
    assert a[:2] == b[:2] and a[2] != b[2]
    slot = mgr.page_state(b[2])["gpu_slot"]
    assert mgr.store.read(slot) == expected_payload([8, 9], 2, 4)  # type: ignore[attr-defined]
    mgr.append("b", [99, 98, 97])
    assert mgr.frontier("b") == 13 and mgr.frontier("a") == 10
    mgr.release(r.lease)
    mgr.check_integrity()
    mgr.free("a")
    mgr.free("b")
    mgr.check_integrity()


def test_explicit_compress_and_recompress(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(auto_compress=False, auto_admit=False)
    m.register("a", toks(0, 5))
    pid = m.sequence_pages("a")[0]
    assert states(m, pid, "compressed", "indexer") == ("none", "none")
    m.compress(pid)
    assert states(m, pid, "compressed", "indexer", "cgen", "igen") == ("complete", "built", 1, 1)
    m.recompress(pid)
    assert states(m, pid, "compressed", "cgen", "igen") == ("complete", 2, 1)  # keys are stale now
    m.build_index(pid)
    assert states(m, pid, "igen") == (2,)
    m.release_tail(pid)
    assert states(m, pid, "tail") == ("released",)
    m.check_integrity()
