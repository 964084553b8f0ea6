"""Lookup: nominal vs effective hit, non-monotonic readiness, recovery plans and their execution."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rt_helpers import small_config, spec_variant, toks

from morphcache.runtime import SHIPPED_SPEC, CacheManager, DiversionError, Miss, NeedsRecovery, Ready
from morphcache.runtime.compiler import CompiledSpec
from morphcache.runtime.errors import MorphcacheError
from morphcache.runtime.lookup import VECTOR_FROM, _frozen, pack_bytes, path_function
from morphcache.runtime.plan import Assignment, RecoveryPlan, choose_path
from morphcache.runtime.search import HitSearch
from morphcache.spec.loader import load_spec


def test_miss(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 8))
    assert mgr.lookup(toks(500, 8)) == Miss()
    assert mgr.metrics().misses == 1


def test_ready_whole_pages(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 12))
    r = mgr.lookup(toks(0, 12) + [1000])
    assert isinstance(r, Ready) and r.lease.tokens == 12 and r.nominal == 12 and r.lease.partial is None
    assert all(mgr.page_state(p)["pin"] == 1 for p in r.lease.pages)
    mgr.release(r.lease)


def test_hit_inside_a_sealed_page(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))  # no window has slid yet
    r = mgr.lookup(toks(0, 6) + [777])
    assert isinstance(r, Ready) and r.lease.tokens == 6
    assert r.lease.partial is not None and r.lease.partial.tokens == (4, 5)
    assert len(r.lease.pages) == 1
    mgr.release(r.lease)


def test_readiness_is_not_monotonic_in_the_position(mgr: CacheManager) -> None:
    """C=4, W=6: after 16 tokens pages 0 and 1 slid out.  A hit at 16 needs windows of pages 2-3 only
    (ready); a hit at 12 needs page 1's window (expired), and every position from 12 down to 1 needs
    page 0's or page 1's: the effective hit is 0, though 16 is readable."""
    mgr.register("a", toks(0, 16))
    mgr.free("a")
    r16 = mgr.lookup(toks(0, 16))
    assert isinstance(r16, Ready) and r16.lease.tokens == 16
    mgr.release(r16.lease)
    r12 = mgr.lookup(toks(0, 12))
    assert isinstance(r12, NeedsRecovery)
    plan = r12.plan
    assert (plan.nominal, plan.effective, plan.target) == (12, 0, 12)
    # only page 1's window is needed at 12 (page 0 ends W tokens before it): one page to replay
    assert {(a.block, a.obj, a.path) for a in plan.assignments} == {(1, "window", "recompute")}
    assert plan.recompute_tokens == 4 and plan.bytes_to_move == 0
    m = mgr.metrics()
    assert m.gap_tokens_by_object == {"window": 12} and m.nominal_tokens - m.effective_tokens == 12
    report = mgr.recover(plan)
    assert report.failed == () and report.done == {"recompute": 1}
    again = mgr.lookup(toks(0, 12))
    assert isinstance(again, Ready) and again.lease.tokens == 12
    mgr.release(again.lease)
    mgr.check_integrity()


def test_prefetch_plan_from_host_and_disk(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 12))
    mgr.free("a")
    pages = list(mgr.pooled)
    mgr.offload(pages[1], "host")
    mgr.offload(pages[2], "disk")
    r = mgr.lookup(toks(0, 12))
    assert isinstance(r, NeedsRecovery)
    plan = r.plan
    # page 0 is resident but its window slid (10 <= 12), so nothing below 12 is readable
    assert plan.effective == 0 and plan.pages_on("prefetch") == (pages[1], pages[2])
    assert plan.bytes_to_move == 2 * mgr.page_bytes and plan.recompute_tokens == 0
    assert plan.missing == {"tier": 2}
    report = mgr.recover(plan)
    assert report.prefetched == 2 and not report.failed
    r2 = mgr.lookup(toks(0, 12))
    assert isinstance(r2, Ready) and r2.lease.tokens == 12
    mgr.release(r2.lease)
    moved = mgr.metrics().bytes_moved
    assert moved["host->gpu"] == moved["disk->gpu"] == mgr.page_bytes
    mgr.check_integrity()


def test_dropped_page_recomputes(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 12))
    mgr.free("a")
    pages = list(mgr.pooled)
    mgr.drop(pages[1])
    r = mgr.lookup(toks(0, 12))
    assert isinstance(r, NeedsRecovery)
    paths = {(a.obj, a.path) for a in r.plan.assignments}
    assert ("tier", "recompute") in paths and r.plan.recompute_tokens == 4
    mgr.recover(r.plan)
    r2 = mgr.lookup(toks(0, 12))
    assert isinstance(r2, Ready) and r2.lease.tokens == 12
    mgr.release(r2.lease)
    mgr.check_integrity()


def test_recovery_no_cheaper_than_prefill_is_a_miss(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))  # "a" stays live: its dropped pages stay known
    for pid in mgr.sequence_pages("a")[:2]:
        mgr.drop(pid)
    assert mgr.lookup(toks(0, 8)) == Miss(8, 0)
    mgr.check_integrity()


def test_compress_path(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(auto_compress=False, auto_admit=False)
    m.register("a", toks(0, 9))
    r = m.lookup(toks(0, 8))
    assert isinstance(r, NeedsRecovery)
    paths = {(a.obj, a.path) for a in r.plan.assignments}
    assert paths == {("compressed", "compress"), ("indexer", "compress")}
    assert r.plan.pages_to_compress == 2 and r.plan.effective == 3  # mid page 0: only its raw tail needed
    m.recover(r.plan)
    r2 = m.lookup(toks(0, 8))
    assert isinstance(r2, Ready) and r2.lease.tokens == 8
    m.release(r2.lease)


def test_overlapping_recovery_paths_raise(tmp_path: Path, make_manager: Callable[..., CacheManager]) -> None:
    overlap = spec_variant(tmp_path, {"lookup.recovery.tier.recompute": "not resident(p)"})
    m = make_manager(overlap)
    m.register("a", toks(0, 8))
    m.free("a")
    m.offload(next(iter(m.pooled)))
    with pytest.raises(DiversionError, match="several recovery paths"):
        m.lookup(toks(0, 8))


# -- the search against a brute-force oracle -----------------------------------------------------------

def _search(page_size: int, window: int, tables: bool = True) -> HitSearch:
    spec = load_spec(SHIPPED_SPEC)
    consts = small_config(page_size=page_size, window=window).spec_constants(spec.constants)
    cs = CompiledSpec(spec, consts)
    return HitSearch(cs.lookup, spec.lookup, consts, page_size, tables)


SEARCHES = {(c, w): _search(c, w) for c, w in ((4, 6), (3, 7), (5, 2), (2, 0))}
BIT_BY_BIT = {(c, w): _search(c, w, tables=False) for c, w in SEARCHES}  # the same searches without tables


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(SEARCHES)), st.lists(st.integers(0, 31), max_size=14), st.data())
def test_effective_hit_matches_brute_force(key: tuple[int, int], masks: list[int],
                                           data: st.DataObject) -> None:
    search = SEARCHES[key]
    # bias towards ready pages so long hits happen
    masks = [m if m % 3 else search.full for m in masks]
    nominal = data.draw(st.integers(0, len(masks) * key[0]))
    assert search.profiles is not None
    assert search.effective(masks, nominal) == search.brute(masks, nominal)
    # the vector backend hands the masks over as an array: the same answer
    assert search.effective(np.asarray(masks, dtype=np.int64), nominal) == search.brute(masks, nominal)
    # and bit by bit, without the per-mask tables: the same answer
    plain = BIT_BY_BIT[key]
    assert plain.effective(masks, nominal) == plain.effective(np.asarray(masks, dtype=np.int64), nominal) == \
        search.brute(masks, nominal)
    # what blocks it and which pages each object needs, off the profile: as ``needed`` says page by page
    pairs = search.blocking(masks, nominal, direct=True)
    assert search.blocked(masks, nominal) == sorted({k for k, _ in pairs})
    assert search.blocked(np.asarray(masks, dtype=np.int64), nominal) == sorted({k for k, _ in pairs})
    every = search.needed_blocks(len(masks), nominal)
    if search.within(len(masks), nominal):  # then what blocks is what a plan finds missing (the lookup counts that)
        missing = [k for k, blocks in enumerate(every) if any(not masks[p] >> k & 1 for p in blocks)]
        assert missing == search.blocked(masks, nominal)
    for k in range(len(search.objects)):
        assert search.needed_pages(k, len(masks), nominal) == list(every[k]) == [
            p for p in range(len(masks)) if search.needed(k, p, nominal, direct=True)]


# -- readiness masks: the vector backend's packed bits against the closures ---------------------------

def test_pack_puts_byte_k_at_bit_k() -> None:
    patterns = np.array([[(v >> k) & 1 for k in range(8)] for v in range(256)], dtype=np.uint8)
    assert pack_bytes(patterns.view("<u8").reshape(256)).tolist() == list(range(256))


@pytest.mark.parametrize("seed", range(4))
def test_vector_masks_match_the_closures(seed: int) -> None:
    rng = np.random.default_rng(seed)
    with CacheManager(config=small_config(gpu_pages=128, host_pages=128)) as m:
        m.register("a", toks(0, 4 * 70 + int(rng.integers(0, 4))))  # a filling last page, windows slid
        m.register("b", toks(1000, 4 * 8))
        m.free("b")
        pages = sorted(m.page_ids())
        for pid in rng.choice(pages, size=6, replace=False).tolist():
            try:
                m.offload(pid, "host")
            except MorphcacheError:
                pass  # the spec refuses some (the filling page): the mix of states is what matters
        ids = np.array(rng.permutation(pages), dtype=np.int64)
        assert len(ids) >= VECTOR_FROM
        lookups = m.parts.lookups
        vector = lookups.masks(ids)
        assert vector.dtype == np.int64
        assert vector.tolist() == lookups.masks(ids, vector=False)
        few = ids[:VECTOR_FROM - 1]  # a short hit: the generated loop against the closures
        assert lookups.masks(few) == lookups.masks(few, vector=False) == vector[:len(few)].tolist()
        assert len(set(vector.tolist())) > 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 5)] * 10), min_size=1, max_size=12))
def test_the_generated_path_loop_picks_what_the_conditions_pick(columns: list[tuple[int, ...]]) -> None:
    """Each page's recovery path from the one generated loop an object against ``choose_path`` over the
    compiled conditions: the same path, or None where those raise DiversionError."""
    cs = CompiledSpec(load_spec(SHIPPED_SPEC), small_config().spec_constants(load_spec(SHIPPED_SPEC).constants))
    lk = cs.lookup
    read = sorted({"compressed", "tail", "indexer", "igen", "cgen", "window", "tier", "copied", "checked", "verified"})
    flags = ("copied", "checked", "verified")
    arrays = {name: {p: row[i] % (2 if name in flags else 6) for p, row in enumerate(columns)}
              for i, name in enumerate(read)}
    pids = list(range(len(columns)))
    for obj in lk.objects:
        got = path_function(lk.ir[obj][1])(pids, {}, arrays)
        for pid, path in zip(pids, got, strict=True):
            try:
                want: str | None = choose_path(obj, pid, pid, lk.recovery[obj], {"p": pid}, arrays)
            except DiversionError:
                want = None
            assert path == want, (obj, pid, {k: v[pid] for k, v in arrays.items()})


@pytest.mark.parametrize("cls", [Assignment, NeedsRecovery, Ready, RecoveryPlan])
def test_answers_made_without_init_have_no_post_init(cls: type) -> None:
    """A lookup makes its answers and a plan's assignments by filling the frozen value's fields at once
    (``lookup._frozen``), not through ``__init__``: right only while the class checks nothing there."""
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert not hasattr(cls, "__post_init__")
    fields = {f.name: i for i, f in enumerate(dataclasses.fields(cls))}
    assert _frozen(cls, **fields) == cls(**fields)
