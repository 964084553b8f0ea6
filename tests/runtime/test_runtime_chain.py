"""The generated chain of a page's firings (chainplan.py: ``open; append x k; seal`` for one reader on one
page) against the same firings one at a time: on the states random workloads leave, every reader, page
and shape of chain fires the same way (the same state, counts and tracked quantifiers) or is refused the
same way (the same error, the same refusal counted, nothing left changed once rolled back); and whole
workloads written through chains and one firing at a time end in the same state with the same answers
and refusals."""

from __future__ import annotations

import random
from array import array
from typing import Any

from rt_helpers import small_config, toks
from test_runtime_differential import workload
from test_runtime_roombatch import Twins

from morphcache.runtime import CacheManager, MorphcacheError
from morphcache.runtime.chainhash import chain_hash, run_keys
from morphcache.runtime.pipeline import Pipeline

SHAPES = [(first, k, last) for first in (True, False) for k in (0, 1, 2, 3, 5) for last in (False, True)]


def one_by_one(pipe: Pipeline) -> Any:
    """The chain's firings, each alone (``fire``: its own generated plan)."""
    def chain(r: int, p: int, first: bool, k: int, last: bool) -> None:
        if first:
            pipe.fire("open", r, p)
        for _ in range(k):
            pipe.fire("append", r, p)
        if last:
            pipe.fire("seal", r, p)
    return chain


def snapshot(pipe: Pipeline) -> tuple[Any, ...]:
    store = pipe.store
    return ({k: bytes(v) for k, v in store.cols.items()}, {k: bytes(v) for k, v in store.rcols.items()},
            {k: {r: dict(row) for r, row in t.items()} for k, t in store.rp.items()},
            {k: v for k, v in pipe.fired.items() if v}, {k: v for k, v in pipe.refused.items() if v})


def tracked(pipe: Pipeline) -> dict[str, Any]:
    return {name: {r: sorted(f) for r, f in t.fails.items()} for name, t in pipe.names.inc.tracked.items()}


def attempt(pipe: Pipeline, chain: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a chain does inside a transaction, rolled back after: its refusal, or the state after."""
    sp = pipe.begin()
    try:
        chain(*args)
        assert pipe.names.inc.stale() == []
        out: tuple[Any, ...] = ("fired", snapshot(pipe))
    except MorphcacheError as exc:
        assert pipe.names.inc.stale() == []  # what the refused chain left, before any rollback
        out = ("refused", type(exc).__name__, str(exc))
    pipe.rollback(sp)
    return (*out, snapshot(pipe))


def test_a_chain_fires_and_refuses_as_its_firings_one_by_one(tmp_path: Any) -> None:
    rng = random.Random(11)
    m = CacheManager(config=small_config(tmp_path, gpu_pages=16, host_pages=4, disk_pages=4))
    for i in range(6):
        m.register(f"s{i}", toks(rng.randrange(3) * 100, rng.randrange(1, 30)))
        if rng.random() < 0.3:
            m.free(f"s{i}")
    m.capture(["s1"])  # a captured reader's open is refused
    pages = m.cached_pages()
    m.offload(pages[0], "host")
    pipe = m.parts.pipe
    chain = pipe.chain("open", "append", "seal")
    assert chain.__name__ == "_chain"  # the generated chain, not the fallback
    fresh = [pipe.store.alloc_page() for _ in range(2)]
    checked = fired = 0
    refusals: set[str] = set()
    for reader in m.parts.readers.sequences():
        r = reader.rid
        for p in [*fresh, *reader.block[-2:], *pages[:3]]:
            for first, k, last in SHAPES:
                args = (r, p, first, k, last)
                for name in list(pipe.names.inc.tracked):  # asked before: kept incrementally
                    pipe.names.inc.value(name, r)
                before = (snapshot(pipe), tracked(pipe))
                got = attempt(pipe, chain, args)
                want = attempt(pipe, one_by_one(pipe), args)
                assert got[0] == want[0], args
                if got[0] == "fired":
                    assert got[1] == want[1], args
                else:
                    assert got[1:3] == want[1:3], args
                    refusals.add(got[2].split(":")[0])
                assert got[-1][:3] == before[0][:3]  # rolled back: as before
                checked += 1
                fired += got[0] == "fired"
    assert checked > 300 and fired > 20 and len(refusals) > 3, (checked, fired, refusals)
    for p in fresh:
        pipe.store.free_page(p)
    m.check_integrity()
    m.close()


def test_workloads_written_through_chains_and_one_by_one_agree(tmp_path: Any) -> None:
    """The random workloads of the differential test, long writes included, on two fast managers: one
    writing its pages through the generated chains, the other firing each event alone."""
    for seed in (4, 5):
        opts = dict(gpu_pages=40, host_pages=10, disk_pages=0, pool_capacity=20, window=8, prefetch_workers=1)
        a = CacheManager(config=small_config(None, **opts))
        b = CacheManager(config=small_config(None, **opts))
        pipe = b.parts.pipe
        pipe.chain = lambda head, repeated, tail, pipe=pipe: one_by_one(pipe)  # type: ignore[method-assign]
        twin = Twins(a, b)
        workload(twin, random.Random(seed), 120)
        for i in range(4):  # long writes: many whole pages, starting mid-page
            twin.do(lambda m, _, i=i: m.register(f"long{i}", toks(3000 + 97 * i, 3 + 11 * i)))
            twin.do(lambda m, _, i=i: m.append(f"long{i}", toks(5000 + 89 * i, 29 + 13 * i)))
        assert a.metrics().events_fired.get("append", 0) > 100
        a.close()
        b.close()


def test_a_writes_seal_keys_are_the_pages_chain_hashes() -> None:
    """``run_keys`` (one vector pass over many pages, page by page over few) gives each page the chain
    hash a seal gives it alone, a partial page's earlier tokens first, the tokens a list or an array."""
    rng = random.Random(3)
    for count in range(1, 7):
        for fill in (0, 1, 3):
            head = [rng.randrange(1 << 64) for _ in range(fill)]
            tail = [rng.randrange(1 << 64) for _ in range(count * 4 - fill + rng.randrange(3))]
            flat, want, h = head + tail, [], 12345
            for k in range(count):
                h = chain_hash(h, flat[4 * k:4 * k + 4])
                want.append(h)
            assert run_keys(12345, head, tail, count, 4) == want
            assert run_keys(12345, head, array("Q", tail), count, 4) == want
