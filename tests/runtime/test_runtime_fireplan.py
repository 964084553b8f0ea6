"""The generated fire plans (fireplan.py) against the pipeline's general code: on the states a random
workload leaves, every event for every reader and page either fires the same way through both (the
same writes, the same count) or is refused the same way; ``allowed`` gives the same answer, and
``propose`` fires exactly where ``allowed`` holds (as ``fire`` does) and changes nothing elsewhere."""

from __future__ import annotations

import random
from typing import Any

from rt_helpers import small_config, toks

from morphcache.runtime import CacheManager, MorphcacheError
from morphcache.runtime.pipeline import Pipeline


def snapshot(pipe: Pipeline) -> tuple[Any, ...]:
    store = pipe.store
    return ({k: bytes(v) for k, v in store.cols.items()}, {k: bytes(v) for k, v in store.rcols.items()},
            {k: {r: dict(row) for r, row in t.items()} for k, t in store.rp.items()},
            {k: v for k, v in pipe.fired.items() if v})


def attempt(pipe: Pipeline, fire: Any) -> tuple[Any, ...]:
    """What one firing does (inside a transaction rolled back after): its refusal, or the state after."""
    sp = pipe.begin()
    try:
        fire()
        out: tuple[Any, ...] = ("fired", snapshot(pipe))
    except MorphcacheError as exc:
        out = ("refused", type(exc).__name__, str(exc), snapshot(pipe))
    pipe.rollback(sp)
    return out


def test_plans_fire_and_refuse_as_the_general_code(tmp_path: Any) -> None:
    rng = random.Random(7)
    m = CacheManager(config=small_config(tmp_path, gpu_pages=12, host_pages=4, disk_pages=4))
    for i in range(6):
        m.register(f"s{i}", toks(rng.randrange(3) * 100, rng.randrange(5, 40)))
        if rng.random() < 0.5:
            m.free(f"s{i}")
    pages = m.cached_pages()
    m.offload(pages[0], "host")
    m.offload(pages[1], "disk")
    pipe = m.parts.pipe
    readers = list(pipe.store.live_readers)
    checked = refused = 0
    for ev in pipe.cspec.events.values():
        if ev.params or ev.observes:
            continue
        rs = readers if ev.takes_reader else [None]
        ps = list(pipe.store.live_pages) if ev.takes_page else [None]
        for r in rs:
            for p in ps:
                assert pipe.allowed(ev.name, r, p) == pipe.allowed_general(ev, r, p), (ev.name, r, p)
                before = snapshot(pipe)
                planned = attempt(pipe, lambda: pipe.fire(ev.name, r, p))  # noqa: B023 - called at once
                assert snapshot(pipe) == before
                general = attempt(pipe, lambda: pipe.fire_general(ev, r, p, None, None))  # noqa: B023
                assert planned == general, (ev.name, r, p)
                allowed = pipe.allowed(ev.name, r, p)
                answers: list[bool] = []
                proposed = attempt(pipe, lambda: answers.append(pipe.propose(ev.name, r, p)))  # noqa: B023
                assert answers == [allowed], (ev.name, r, p)
                assert proposed == (planned if allowed else ("fired", before)), (ev.name, r, p)
                checked += 1
                refused += planned[0] == "refused"
    assert checked > 200 and 0 < refused < checked
    m.check_integrity()
    m.close()


def test_proposals_count_no_refusal_whatever_their_batch() -> None:
    """The runtime's proposals (here ``admit`` of sealed pages into a full pool) count no refusal, be
    they one at a time (a short write), a batch the vector backend decides, or the same batch fired
    one by one by the general path; the counts agree between the fast and the general path."""
    counts = []
    for fast in (True, False):
        m = CacheManager(config=small_config(None, gpu_pages=400, pool_capacity=30, host_pages=0, disk_pages=0,
                                             fast=fast))
        m.register("a", toks(0, 100))  # 25 sealed pages: their proposals one batch each
        m.free("a")
        m.register("b", toks(1000, 100))  # the pool fills up: admissions refused
        m.free("b")
        for i in range(6):  # short writes: a page at a time
            m.register(f"s{i}", toks(5000 + 100 * i, 9))
            m.append_batch({f"s{i}": [1]})
        snap = m.metrics()
        assert len(m.cached_pages()) == 30
        counts.append(dict(snap.events_refused))
        m.close()
    assert counts[0] == counts[1] == {}, counts



def second_open(fast: bool) -> list[str]:
    """Whether an ``open`` fires at a page boundary, and whether a second one does right after it."""
    m = CacheManager(config=small_config(None, gpu_pages=16, fast=fast))
    m.register("a", toks(0, 8))  # two pages sealed: the frontier at a page boundary
    pipe, rid = m.parts.pipe, m.parts.readers.sequence("a").rid

    def fire_open() -> None:
        pipe.fire("open", rid, pipe.store.alloc_page())

    got = [attempt(pipe, fire_open)[0]]
    sp = pipe.begin()
    fire_open()
    got.append(attempt(pipe, fire_open)[0])
    pipe.rollback(sp)
    return got


def test_a_pending_page_is_evaluated_before_a_plan_reads_the_tracked_value() -> None:
    """An ``open`` leaves its page pending for the reader's ``next_block_free``; a second ``open`` at
    the same frontier is refused by the generated plan exactly as by the general code."""
    assert [second_open(True), second_open(False)] == [["fired", "refused"]] * 2


def test_a_quantifier_in_line_holds_where_its_generator_does() -> None:
    """A guard's ``all``/``any`` conjunct as a plan's loop (``guard_lines``) against the generator form,
    after a plain conjunct, on random domains (the empty one included)."""
    from morphcache.runtime.fireplan import guard_lines

    rng = random.Random(3)
    for kind in ("all", "any"):
        parts = [("expr", "head"), (kind, "_s0", "ids", "body[_s0]")]
        lines = [*guard_lines(parts, [p[-1] for p in parts], "return False"), "return True"]
        text = "def _g(head, ids, body):\n" + "".join(f"    {line}\n" for line in lines)
        scope: dict[str, Any] = {}
        exec(compile(text, "<test>", "exec"), scope)  # noqa: S102 - the lines under test
        for _ in range(200):
            body = [rng.random() < 0.7 for _ in range(rng.randrange(4))]
            head = rng.random() < 0.8
            quant = all(body) if kind == "all" else any(body)
            assert scope["_g"](head, range(len(body)), body) == bool(head and quant), (kind, head, body)


def test_plans_built_before_the_store_grows_read_and_write_its_grown_columns(tmp_path: Any) -> None:
    """A plan reads the state columns as globals of its own (plancompile.py); growing the store replaces
    the columns, and the plans built before read and write the new ones."""
    m = CacheManager(config=small_config(tmp_path, gpu_pages=12, host_pages=4, disk_pages=4))
    m.register("a", toks(0, 40))
    m.free("a")
    pipe = m.parts.pipe
    store = pipe.store
    plans = [pipe.firer(name) for name in ("open", "seal", "detach", "free", "forget")]
    pages, readers = store.page_cap, store.reader_cap
    sp = pipe.begin()
    store.alloc_pages(pages + 1)  # the capacity stays grown after the rollback
    for _ in range(readers + 1):
        store.alloc_reader()
    pipe.rollback(sp)
    assert (store.page_cap, store.reader_cap) > (pages, readers)
    for plan in plans:
        bound = {k: v for k, v in plan.__globals__.items() if k[:2] in ("C_", "R_")}
        assert bound and all(v is (store.cols if k[0] == "C" else store.rcols)[k[2:]] for k, v in bound.items())
    for i in range(3):
        m.register(f"b{i}", toks(i * 100, 40))
        assert m.frontier(f"b{i}") == 40
        m.check_integrity()
        m.free(f"b{i}")
    m.check_integrity()
    m.close()
