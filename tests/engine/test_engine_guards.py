"""The guards around a forward: the device generation guard (TOCTOU), pins while a session reads,
a GPU pool too small for a request, and the unsafe mode's hash-only table."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from eng_helpers import TOL, C, make_engine

from morphcache.engine import EngineCapacityError, HashOnlyIndex
from morphcache.engine.session import SessionFailedError
from morphcache.kernels import StaleReadError
from morphcache.model import HybridModel
from morphcache.runtime import PinnedPageError


def _tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(256) for _ in range(n)]


@pytest.mark.parametrize("ops", ["triton", "reference"])
def test_a_generation_bumped_under_a_lease_is_refused(model: HybridModel, ops: str) -> None:
    engine = make_engine(model, None, ops=ops)
    prompt = _tokens(1, C + 5)
    session = engine.session("toctou")
    try:
        session.open(prompt)
        assert session.lease is not None and session.lease.pages
        pid = session.lease.pages[0]
        with pytest.raises(PinnedPageError):
            engine.manager.offload(pid)
        with pytest.raises(PinnedPageError):
            engine.manager.drop(pid)
        slot = int(engine.manager.page_state(pid)["gpu_slot"])
        engine.pools.gen_table[slot] += 1  # the slot rewritten behind the lease's back
        with pytest.raises(StaleReadError):
            session.extend([7])
        with pytest.raises(SessionFailedError):
            session.extend([8])
    finally:
        session.close()
    engine.check_integrity()
    engine.pools.gen_table[slot] -= 1
    result = engine.serve(prompt + [7])  # the cache is intact: served again from a lookup
    assert result.start == C and engine.golden_diff(result) <= TOL
    engine.check_integrity()
    engine.close()


def test_a_stale_read_is_retried_from_a_new_lookup(model: HybridModel) -> None:
    engine = make_engine(model, None, ops="reference")
    prompt = _tokens(3, 2 * C + 3)
    engine.serve(prompt)
    real = engine.ops
    calls = {"n": 0}

    class Flaky:
        """Refuses the first read of the next request, as if a page moved under its lease."""

        name, guarded = real.name, True

        def __getattr__(self, attr: str) -> object:
            return getattr(real, attr)

        def compressed_read(self, *args: object) -> object:
            calls["n"] += 1
            if calls["n"] == 1:
                raise StaleReadError("compressed_read", [0])
            return real.compressed_read(*args)  # type: ignore[arg-type]

    engine.ops = Flaky()  # type: ignore[assignment]
    result = engine.serve(prompt + [1, 2, 3])
    assert calls["n"] > 1 and result.start == 2 * C and engine.golden_diff(result) <= TOL
    engine.check_integrity()
    engine.close()


def test_a_pool_too_small_for_the_request_is_refused_cleanly(model: HybridModel) -> None:
    engine = make_engine(model, None, gpu_pages=3, host_pages=8)
    with pytest.raises(EngineCapacityError):
        engine.serve(_tokens(2, 5 * C))
    engine.check_integrity()
    m = engine.manager.metrics()
    assert m.extra["live_sequences"] == 0 and m.extra["live_leases"] == 0
    assert m.extra["pooled_pages"] == 0  # nothing half-written entered the reuse pool
    engine.close()


def test_hash_only_table_trusts_what_it_remembers(tmp_path: Path) -> None:
    t = HashOnlyIndex(4)
    t.record([((1, 2, 3, 4), 7), ((5, 6, 7, 8), 2), ((9, 10, 11, 12), 9), ((13,), 3)])
    hit = t.lookup([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 99, 1], limit=11)
    assert hit.slots == (7, 2) and hit.partial_slot == 9 and hit.partial_len == 2 and hit.tokens(4) == 10
    assert t.lookup([1, 2, 3, 4, 5], limit=3).tokens(4) == 3  # partial of the first page
    assert t.lookup([2, 2], limit=2).tokens(4) == 0
