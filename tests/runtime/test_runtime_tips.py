"""What a decode step reads instead of walking its sequences: the tip columns (each reader's last
page, its slot and record), the ``block`` entries of many readers read off the reverse index, and the
last step's readers kept for the next one with the same names; each against what it stands for."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rt_helpers import bare_store, small_config, toks

from morphcache.runtime import BadInputError, CacheManager, IntegrityError, Ready, UnknownSequenceError

READERS, PAGES = 12, 10

write = st.one_of(
    st.tuples(st.just("one"), st.integers(0, READERS - 1), st.integers(0, PAGES - 1), st.integers(0, 1)),
    st.tuples(st.just("row"), st.integers(0, READERS - 1),
              st.lists(st.integers(0, PAGES - 1), min_size=1, max_size=PAGES, unique=True), st.integers(0, 1)),
    st.tuples(st.just("begin")),
    st.tuples(st.just("end"), st.booleans()),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(write, max_size=30), st.lists(st.integers(0, READERS * PAGES - 1), min_size=9, max_size=40))
def test_block_of_many_readers_reads_as_the_rows(ops, pairs) -> None:
    """``block`` takes two values, so a pair is 'in' exactly where the reverse index has its reader:
    pages held by one reader and by several, writes single and whole-row, rollbacks."""
    with CacheManager() as m:
        store = bare_store(m, PAGES, READERS)
        view = store.views["block"]
        assert view.holders is not None
        model: dict[tuple[int, int], int] = {}
        saved: list[tuple[int, dict[tuple[int, int], int]]] = []
        for o in ops:
            if o[0] == "one":
                store.set_rp("block", o[1], o[2], o[3])
                model[(o[1], o[2])] = o[3]
            elif o[0] == "row":
                store.set_rp_row("block", o[1], np.asarray(o[2], dtype=np.int64), o[3])
                model.update({(o[1], q): o[3] for q in o[2]})
            elif o[0] == "begin":
                saved.append((store.begin(), dict(model)))
            elif saved:
                sp, before = saved.pop()
                if o[1]:
                    store.commit()
                else:
                    store.rollback(sp)
                    model = before
        rr = np.asarray([x // PAGES for x in pairs], dtype=np.int64)
        pp = np.asarray([x % PAGES for x in pairs], dtype=np.int64)
        if rr[0] == rr[-1]:
            rr[-1] = (rr[0] + 1) % READERS
        want = [model.get((r, q), 0) for r, q in zip(rr.tolist(), pp.tolist(), strict=True)]
        assert view.gather(rr, pp).tolist() == want
        store.set_rp("block", 0, 0, 2)  # a third value: the rows answer from now on
        assert view.holders is None
        want = [2 if (r, q) == (0, 0) else w for r, q, w in zip(rr.tolist(), pp.tolist(), want, strict=True)]
        assert view.gather(rr, pp).tolist() == want


def test_tip_columns_follow_the_block_tables() -> None:
    """Registers, decode steps, an attached prefix, frees and a refused append keep the tip columns
    equal to the block tables (``check_integrity`` compares them), and a wrong column is caught."""
    rng = random.Random(3)
    m = CacheManager(config=small_config(gpu_pages=64, pool_capacity=16))
    m.register("w", toks(0, 9))
    res = m.lookup(toks(0, 9))
    assert isinstance(res, Ready)
    m.register("a")
    m.attach("a", res.lease)
    m.release(res.lease)
    m.check_integrity()
    seqs = ["w", "a"]
    for i in range(10):
        sid = f"s{i}"
        m.register(sid, toks(100 * i, rng.randrange(0, 7)))
        seqs.append(sid)
        m.append_batch({s: [rng.randrange(50)] for s in seqs})
        m.check_integrity()
        if i % 4 == 3:
            m.free(seqs.pop(2))
            m.check_integrity()
    with pytest.raises(BadInputError):  # a bad token: nothing changes
        m.append("w", [1, -1])
    m.check_integrity()
    tips = m.parts.sequences.writer.tips
    rid = m.parts.readers.sequence("w").rid
    tips.page[rid] = -1
    with pytest.raises(IntegrityError, match="tip column"):
        m.check_integrity()
    m.close()


def test_a_long_write_undone_midway_points_the_tip_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write opening many pages keeps one undo for the tip (not one a page): a fault at its third
    page's open rolls everything back, the tip included."""
    m = CacheManager(config=small_config(gpu_pages=64, pool_capacity=16))
    m.register("w", toks(0, 6))
    writer = m.parts.sequences.writer
    rid = m.parts.readers.sequence("w").rid
    before = (int(writer.tips.page[rid]), int(writer.tips.slot[rid]), writer.tips.record[rid])
    chain, calls = writer.pipe.chain, []

    def faulty(*names: str) -> object:
        fire = chain(*names)

        def failing(r: int, p: int, first: bool, k: int, last: bool) -> None:
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("fault at the third page")
            fire(r, p, first, k, last)

        return failing

    monkeypatch.setattr(writer.pipe, "chain", faulty)
    with pytest.raises(RuntimeError):
        m.append("w", toks(50, 40))
    assert len(calls) == 3
    assert (int(writer.tips.page[rid]), int(writer.tips.slot[rid]), writer.tips.record[rid]) == before
    assert m.frontier("w") == 6
    m.check_integrity()
    monkeypatch.undo()
    m.append("w", toks(50, 40))
    assert writer.tips.page[rid] == m.sequence_pages("w")[-1]
    m.check_integrity()
    m.close()


def test_the_last_steps_readers_go_with_a_name() -> None:
    """A step with the same names as the last one reuses its readers, until a sequence is freed (its
    name gone, or its reader kept idle by a lease) or registered again."""
    m = CacheManager(config=small_config(gpu_pages=64, pool_capacity=16))
    names = [f"s{i}" for i in range(6)]
    for sid in names:
        m.register(sid, toks(0, 5))
    m.append_batch({sid: [1] for sid in names})
    m.append_batch({sid: [2] for sid in names})
    m.free("s2")
    with pytest.raises(UnknownSequenceError):
        m.append_batch({sid: [3] for sid in names})
    m.register("s2", toks(0, 3))
    m.append_batch({sid: [3] for sid in names})
    assert m.frontier("s2") == 4 and m.frontier("s0") == 8
    res = m.lookup(toks(0, 4), owner="s4")  # a lease keeps the reader after its sequence is freed
    m.append_batch({sid: [4] for sid in names})
    m.free("s4")
    with pytest.raises(UnknownSequenceError):
        m.append_batch({sid: [5] for sid in names})
    m.release(res.lease)  # type: ignore[union-attr]
    m.check_integrity()
    m.close()
