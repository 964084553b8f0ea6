"""check_integrity: it passes on a live state and names the values that disagree when tampered with."""

from __future__ import annotations

import pytest
from rt_helpers import toks

from morphcache.runtime import CacheManager, IntegrityError, Ready


def tampered(m: CacheManager) -> list[str]:
    with pytest.raises(IntegrityError) as exc:
        m.check_integrity()
    return list(exc.value.problems)


def _set(m: CacheManager, name: str, pid: int, value: object) -> None:
    """Write a state value behind the pipeline's back (what a bug would do)."""
    store = m.parts.pipe.store
    code = store.cspec.codes[name][value] if name in store.cspec.codes else value  # type: ignore[index]
    store.set_page(name, pid, code)


def test_spec_invariant_violation_is_reported_with_values(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    pid = mgr.sequence_pages("a")[0]
    _set(mgr, "compressed", pid, "none")  # a pooled page whose compressed entry vanished
    problems = tampered(mgr)
    assert any("'admission_morphology' fails" in p and "compressed='none'" in p for p in problems), problems


def test_pin_without_lease_is_reported(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    r = mgr.lookup(toks(0, 8))
    assert isinstance(r, Ready)
    mgr.check_integrity()
    pid = r.lease.pages[0]
    _set(mgr, "pin", pid, 2)
    assert any(f"page {pid}: pin=2 but 1 live lease" in p for p in tampered(mgr))


def test_payload_in_the_wrong_store_is_reported(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    pid = mgr.sequence_pages("a")[0]
    mgr.host.put(pid, b"stray")
    assert any(f"page {pid}: tier 'gpu' but payload in ['gpu', 'host']" in p for p in tampered(mgr))


def test_stale_pool_aggregate_is_reported(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    names = mgr.parts.pipe.names
    agg = next(iter(names.agg_contrib))
    names.refresh()
    names.n[agg] += 1  # the maintained pool count drifts from the pages
    assert any("aggregate sum(1 if pool[q] == 'pooled'" in p and "fresh 2" in p for p in tampered(mgr))


def test_forgotten_block_table_is_reported(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    mgr.parts.readers.by_name["a"].block.clear()  # the block table vanished without detach
    problems = tampered(mgr)
    assert any("reader 'a': block table [] but block entries at [0, 1, 2]" in p for p in problems), problems
