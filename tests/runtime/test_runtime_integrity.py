"""check_integrity: it passes on a live state and names the values that disagree when tampered with."""

from __future__ import annotations

import pytest
from rt_helpers import toks

from morphcache.runtime import CacheManager, IntegrityError, Ready


def tampered(m: CacheManager) -> list[str]:
    with pytest.raises(IntegrityError) as exc:
        m.check_integrity()
    return list(exc.value.problems)


def test_spec_invariant_violation_is_reported_with_values(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    pid = mgr.sequence_pages("a")[0]
    mgr.cols["compressed"][pid] = "none"  # a pooled page whose compressed entry vanished
    mgr.pages.masks[pid] = None
    problems = tampered(mgr)
    assert any("'admission_morphology' fails" in p and "compressed='none'" in p for p in problems), problems


def test_pin_without_lease_is_reported(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    r = mgr.lookup(toks(0, 8))
    assert isinstance(r, Ready)
    mgr.check_integrity()
    pid = r.lease.pages[0]
    mgr.cols["pin"][pid] = 2
    assert any(f"page {pid}: pin=2 but 1 live lease" in p for p in tampered(mgr))


def test_payload_in_the_wrong_store_is_reported(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    pid = mgr.sequence_pages("a")[0]
    mgr.host.put(pid, b"stray")
    assert any(f"page {pid}: tier 'gpu' but payload in ['gpu', 'host']" in p for p in tampered(mgr))


def test_stale_readiness_cache_is_reported(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    pid = mgr.sequence_pages("a")[0]
    mgr.probe(toks(0, 8))
    mgr.pages.masks[pid] = 0  # claims nothing is ready
    assert any("cached readiness" in p for p in tampered(mgr))


def test_forgotten_sequence_is_reported(mgr: CacheManager) -> None:
    mgr.register("a", toks(0, 9))
    mgr.core.seqs.pop("a")  # the sequence vanished without free(): its pages still name it
    problems = tampered(mgr)
    assert any("held by sequence 'a', which does not hold it" in p for p in problems), problems
