"""Per-(reader, page) rows in their two forms (dict, arrays): every read agrees with a plain model.

Random single writes, whole-row batch writes (with and without arrays), transactions rolled back or
kept, and every kind of read (scalar, one reader's gather, many readers' gather, rows, tables,
reverse index, pages of a reader), against a dict of dicts kept beside the store.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from rt_helpers import bare_store

from morphcache.runtime import CacheManager, sparse
from morphcache.runtime.sparse import frozen

READERS, PAGES = 3, 12
NAMES = ("lpin", "block")  # one plain, one reverse-indexed

op = st.one_of(
    st.tuples(st.just("one"), st.sampled_from(NAMES), st.integers(0, READERS - 1), st.integers(0, PAGES - 1),
              st.integers(0, 3)),
    st.tuples(st.just("row"), st.sampled_from(NAMES), st.integers(0, READERS - 1),
              st.lists(st.integers(0, PAGES - 1), min_size=1, max_size=PAGES, unique=True),
              st.one_of(st.integers(0, 3), st.lists(st.integers(0, 3), min_size=PAGES, max_size=PAGES)),
              st.booleans()),
    st.tuples(st.just("begin")),
    st.tuples(st.just("end"), st.booleans()),
    st.tuples(st.just("read"), st.sampled_from(NAMES), st.integers(0, READERS - 1),
              st.lists(st.integers(0, PAGES - 1), min_size=1, max_size=PAGES, unique=True)),
    st.tuples(st.just("again"), st.sampled_from(NAMES), st.integers(0, READERS - 1)),
    st.tuples(st.just("peek"), st.sampled_from(NAMES), st.integers(0, READERS - 1), st.integers(0, PAGES - 1)),
    st.tuples(st.just("rewrite"), st.sampled_from(NAMES), st.integers(0, READERS - 1), st.integers(0, 3),
              st.booleans()),
)


def _agree(store, model, init) -> None:
    for name in NAMES:
        view = store.views[name]
        for rid in range(READERS):
            want = {q: v for q, v in model[name].get(rid, {}).items() if v != init[name]}
            assert dict(store.rp_row(name, rid)) == want, (name, rid)
            assert store.has_rp(name, rid) == bool(want)
            for q in range(PAGES):
                assert view[(rid, q)] == want.get(q, init[name])
            pages = np.arange(PAGES, dtype=np.int64)
            assert view.gather(rid, pages).tolist() == [want.get(q, init[name]) for q in range(PAGES)]
        rr = np.repeat(np.arange(READERS, dtype=np.int64), PAGES)
        pp = np.tile(np.arange(PAGES, dtype=np.int64), READERS)
        expect = [model[name].get(r, {}).get(q, init[name]) for r, q in zip(rr.tolist(), pp.tolist(), strict=True)]
        assert view.gather(rr, pp).tolist() == expect
        for q in range(PAGES):
            holders = {r for r in range(READERS) if model[name].get(r, {}).get(q, init[name]) != init[name]}
            assert store.readers_at((name,), q) == holders


@settings(max_examples=60, deadline=None)
@given(st.lists(op, max_size=40), st.sampled_from([sparse.SHORT_ROW, 0]))
def test_rows_in_both_forms_read_as_the_model(ops, short: int) -> None:
    """Rows in array form read by scalar reads as a dict made once (``short``: the default) or searched
    in their arrays (0): the same values."""
    kept, sparse.SHORT_ROW = sparse.SHORT_ROW, short
    try:
        _replay(ops)
    finally:
        sparse.SHORT_ROW = kept


def _replay(ops) -> None:
    with CacheManager() as m:
        store = bare_store(m, PAGES, READERS)
        init = {name: int(store.init[name]) for name in NAMES}
        model: dict[str, dict[int, dict[int, int]]] = {name: {} for name in NAMES}
        saved: list[tuple[int, dict[str, dict[int, dict[int, int]]]]] = []
        last: dict[tuple[str, int], list[int]] = {}
        for o in ops:
            if o[0] == "one":
                _, name, rid, pid, value = o
                store.set_rp(name, rid, pid, value)
                model[name].setdefault(rid, {})[pid] = value
            elif o[0] in ("row", "rewrite"):  # a whole-row write (again on the pages last written whole)
                if o[0] == "row":
                    _, name, rid, pids, values, with_arrays = o
                else:
                    _, name, rid, values, with_arrays = o
                    pids = last.get((name, rid), [0])
                vals = values if isinstance(values, int) else values[:len(pids)]
                arrays = (np.asarray(pids, dtype=np.int64),
                          vals if isinstance(vals, int) else np.asarray(vals, dtype=np.int64))
                if with_arrays:
                    store.set_rp_row(name, rid, *arrays)
                else:
                    store.set_rp_row(name, rid, list(pids), vals)
                last[name, rid] = list(pids)
                for i, pid in enumerate(pids):
                    model[name].setdefault(rid, {})[pid] = vals if isinstance(vals, int) else vals[i]
            elif o[0] == "begin":
                saved.append((store.begin(), {n: {r: dict(row) for r, row in t.items()} for n, t in model.items()}))
            elif o[0] == "end" and saved:
                sp, before = saved.pop()
                if o[1]:
                    store.rollback(sp)
                    model = before
                else:
                    store.commit()
            elif o[0] == "peek":  # a scalar read between writes, as a single firing's guard reads
                _, name, rid, pid = o
                assert store.views[name][(rid, pid)] == model[name].get(rid, {}).get(pid, init[name])
            elif o[0] in ("read", "again"):  # a batch read, as a firing would (may find the array form)
                name, rid = o[1], o[2]
                pids = o[3] if o[0] == "read" else last.get((name, rid), [0])
                got = store.views[name].gather(rid, np.asarray(pids, dtype=np.int64))
                assert got.tolist() == [model[name].get(rid, {}).get(q, init[name]) for q in pids]
            for name in NAMES:
                for rid in list(model[name]):
                    model[name][rid] = {q: v for q, v in model[name][rid].items() if v != init[name]}
        for name in NAMES:  # read before anything builds the dicts: rows still in array form answer
            for rid in range(READERS):
                assert set(store.pages_of((name,), rid)) == set(model[name].get(rid, {}))
        _agree(store, model, init)
        for rid in range(READERS):
            pages = {q for name in NAMES for q in model[name].get(rid, {})}
            assert set(store.pages_of(NAMES, rid)) == pages


def test_a_page_added_to_a_row_in_array_form_survives_a_batch_over_the_old_pages() -> None:
    """A block table written whole (attach), one page opened after it, then the attached pages
    written again: the opened page is still there, and a batch over all pages reads it."""
    with CacheManager() as m:
        store = m.parts.pipe.store
        for _ in range(4):
            store.alloc_page()
        rid = store.alloc_reader()
        old = np.asarray([0, 1, 2], dtype=np.int64)
        store.set_rp_row("lpin", rid, old, 1)
        store.set_rp("lpin", rid, 3, 2)
        assert store.views["lpin"].gather(rid, np.arange(4, dtype=np.int64)).tolist() == [1, 1, 1, 2]
        store.set_rp_row("lpin", rid, old, 0)
        assert dict(store.rp_row("lpin", rid)) == {3: 2}
        store.set_rp_row("lpin", rid, old, 1)
        store.set_rp("lpin", rid, 3, 5)
        store.set_rp_row("lpin", rid, np.arange(4, dtype=np.int64), np.full(4, 2, dtype=np.int64))
        assert store.views["lpin"].gather(rid, np.arange(4, dtype=np.int64)).tolist() == [2, 2, 2, 2]
        assert dict(store.rp_row("lpin", rid)) == {0: 2, 1: 2, 2: 2, 3: 2}


hop = st.tuples(st.sampled_from(["hold", "unhold", "hold_many", "unhold_many"]), st.integers(0, 3),
                st.lists(st.integers(0, 15), min_size=1, max_size=16, unique=True))


@settings(max_examples=80, deadline=None)
@given(st.lists(hop, max_size=30))
def test_holders_agree_with_a_set_per_page(ops) -> None:
    """The reverse index (one slot a page, a set where shared) against a plain set per page; a batch's
    reindex page by page (a short batch) and by array operations (a long one) alike."""
    from morphcache.runtime import holders as module

    h, hv = module.Holders(4), module.Holders(4)
    h.grow(16)
    hv.grow(16)
    model: dict[int, set[int]] = {q: set() for q in range(16)}
    for kind, rid, pids in ops:
        if kind == "hold":
            h.hold(pids[0], rid)
            hv.hold(pids[0], rid)
            model[pids[0]].add(rid)
        elif kind == "unhold":
            h.unhold(pids[0], rid)
            hv.unhold(pids[0], rid)
            model[pids[0]].discard(rid)
        else:
            pages = [q for q in pids if (rid in model[q]) == (kind == "unhold_many")]  # the contract: they change
            arr = np.asarray(pages, dtype=np.int64)
            olds = [1 if rid in model[q] else 0 for q in pages]
            h.reindex(rid, arr, olds, 0 if kind == "unhold_many" else 1, 0)
            scalar, module.SCALAR_UP_TO = module.SCALAR_UP_TO, -1  # the array operations, whatever the length
            try:
                hv.reindex(rid, arr, olds, 0 if kind == "unhold_many" else 1, 0)
            finally:
                module.SCALAR_UP_TO = scalar
            for q in pages:
                (model[q].discard if kind == "unhold_many" else model[q].add)(rid)
        for q in range(16):
            assert h.readers(q) == hv.readers(q) == model[q]
            got = h.get(q)
            assert ({got} if isinstance(got, int) else (got or set())) == model[q]


def test_the_pages_of_a_row_in_array_form_include_pages_added_after_it() -> None:
    """An attached block table (array form) and a page opened after it: a quantifier over the reader's
    pages ranges over both."""
    with CacheManager() as m:
        store = m.parts.pipe.store
        for _ in range(4):
            store.alloc_page()
        rid = store.alloc_reader()
        store.set_rp_row("lpin", rid, np.asarray([0, 1, 2], dtype=np.int64), 1)
        store.set_rp("lpin", rid, 3, 1)
        assert rid in store.views["lpin"].only  # still in array form
        assert sorted(store.pages_of(("lpin",), rid)) == [0, 1, 2, 3]
        assert sorted(store.pages_array(("lpin",), rid).tolist()) == [0, 1, 2, 3]


def test_frozen_copies_once_and_shares_what_it_made() -> None:
    """A lease's pages are copied once, read-only, then shared (its rows and the Lease keep the same array);
    anything another array could change is copied."""
    base = np.arange(10, dtype=np.int64)
    view = base[2:8]
    once = frozen(view)
    assert once is not view and not once.flags.writeable and once.tolist() == list(range(2, 8))
    assert frozen(once) is once
    base[3] = 99  # the caller's array changes: the frozen copy does not
    assert once.tolist() == list(range(2, 8))
    ro_view = once[1:]
    assert frozen(ro_view) is not ro_view  # a view of another array is copied (its base could be written)
    assert frozen([4, 5]).tolist() == [4, 5] and frozen(np.arange(3, dtype=np.int32)).dtype == np.int64
