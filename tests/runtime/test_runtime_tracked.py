"""Tracked quantifiers over a reader's pages: the first evaluation of a long block table is one vector
evaluation, and it agrees page for page with the generated closures."""

from __future__ import annotations

from rt_helpers import small_config, toks

from morphcache.runtime import CacheManager, Ready


def test_a_long_attached_prefix_tracks_what_the_closures_compute() -> None:
    """A 40-page prefix (windows slid behind the frontier on most pages) attached to a new sequence:
    ``end_attach`` and ``open`` ask the tracked quantifiers of that reader for the first time, over
    more pages than the vector threshold; the kept failing pages equal a page-by-page evaluation (and
    ``check_integrity`` compares them again after more events)."""
    pages = 40
    m = CacheManager(config=small_config(gpu_pages=4 * pages, pool_capacity=4 * pages, host_pages=0))
    prompt = toks(1, 4 * pages)
    m.register("first", prompt)
    m.free("first")
    res = m.lookup(prompt, owner="second")
    assert isinstance(res, Ready) and len(res.lease.pages) == pages
    m.register("second")
    m.attach("second", res.lease)
    inc, store = m.parts.pipe.names.inc, m.parts.pipe.store
    rid = m.parts.readers.sequence("second").rid
    checked = 0
    for name, t in inc.tracked.items():
        kept = t.fails.get(rid)
        domain = list(store.pages_of(t.domain_vars, rid))
        if kept is None:
            continue
        checked += len(domain) >= 32  # long enough for the vector evaluation
        fresh = {q for q in domain if not inc._holds(t, rid, q)}
        assert set(kept) == fresh, name
        assert inc.value(name, rid) == inc.direct(name, rid)
    assert checked, "no tracked quantifier of the reader was evaluated over the whole prefix"
    m.release(res.lease)
    m.append("second", toks(10_000, 5))
    m.check_integrity()


def test_pending_pages_are_evaluated_when_asked() -> None:
    """An ``open`` writes its page at the reader's frontier, an event not proved to keep the tracked
    body there: the page is pending for the reader, not evaluated; every value asked afterwards (the
    next open's guard, or here after every step) equals a fresh evaluation, and ``check_integrity``
    finds nothing stale."""
    m = CacheManager(config=small_config(gpu_pages=200, pool_capacity=200, host_pages=0))
    for i in range(6):
        m.register(f"s{i}", toks(100 * i, 3 + 2 * i))
    inc, readers = m.parts.pipe.names.inc, m.parts.readers
    deferred = 0
    for step in range(30):
        m.append_batch({f"s{i}": [step] for i in range(6)})
        deferred += sum(len(q) for t in inc.tracked.values() for q in t.pending.values())
        for i in range(6):
            rid = readers.sequence(f"s{i}").rid
            for name in inc.tracked:
                assert inc.value(name, rid) == inc.direct(name, rid), (step, i, name)
        m.check_integrity()
    assert deferred, "no page was left pending"
