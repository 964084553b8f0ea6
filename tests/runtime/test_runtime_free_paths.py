"""A short block table is freed, and a one-page lease released, with scalar reads (which pages to
propose for the pool, which to collect); a long one with arrays.  The same random workloads on two
managers, one taking the scalar reads wherever they apply, the other the arrays everywhere: after
every operation the same answers (or refusals) and identical state."""

from __future__ import annotations

import random
from typing import Any

import pytest
from rt_helpers import digest, small_config, toks

from morphcache.runtime import CacheManager, Lease, MorphcacheError, Ready
from morphcache.runtime.store import expected_payload

HEADS = [toks(0, 30), toks(0, 9) + toks(400, 22), toks(800, 26)]


def _twin() -> tuple[CacheManager, CacheManager]:
    scalar = CacheManager(config=small_config(gpu_pages=24, pool_capacity=10))
    arrays = CacheManager(config=small_config(gpu_pages=24, pool_capacity=10))
    arrays.parts.sequences.short_table = 0
    arrays.parts.collector.short = 0
    return scalar, arrays


def _show(out: Any) -> Any:
    if isinstance(out, Ready):
        return ("ready", out.nominal, out.lease.pages, out.lease.tokens)
    return out if isinstance(out, (int, tuple, type(None))) else type(out).__name__


class Pair(tuple):  # type: ignore[type-arg]
    """An argument with one value per manager (a lease each holds)."""


def _do(ms: tuple[CacheManager, CacheManager], method: str, *args: Any, **kw: Any) -> list[Any]:
    """``method(*args, **kw)`` on both managers; the same answer or refusal, then the same state."""
    outs: list[Any] = []
    for i, m in enumerate(ms):
        try:
            outs.append(getattr(m, method)(*[a[i] if isinstance(a, Pair) else a for a in args], **kw))
        except MorphcacheError as exc:
            outs.append(("refused", type(exc).__name__, str(exc)))
    assert _show(outs[0]) == _show(outs[1])
    a, b = digest(ms[0]), digest(ms[1])
    for key in a:
        assert a[key] == b[key], key
    ms[0].check_integrity()
    ms[1].check_integrity()
    return outs


@pytest.mark.parametrize("seed", range(4))
def test_scalar_and_array_reads_free_and_release_alike(seed: int) -> None:
    rng = random.Random(seed)
    ms = _twin()
    live: list[str] = []
    leases: list[Pair] = []
    for step in range(70):
        roll = rng.random()
        name = f"s{step}"
        head = rng.choice(HEADS)[: rng.randrange(4, 10) if rng.random() < 0.4 else rng.randrange(1, 31)]  # (one page)
        if roll < 0.3 or not live:  # a sequence written whole, or started from a leased prefix
            outs = _do(ms, "lookup", head + [9000 + step], owner=name)
            got = Pair(out.lease if isinstance(out, Ready) else None for out in outs)
            if got[0] is not None and rng.random() < 0.7:
                _do(ms, "register", name)
                _do(ms, "attach", name, got)
                if rng.random() < 0.5:
                    _do(ms, "release", got)
                else:
                    leases.append(got)
            else:
                if got[0] is not None:
                    _do(ms, "release", got)
                _do(ms, "register", name, head + toks(2000 + 50 * step, rng.randrange(0, 9)))
            live.append(name)
        elif roll < 0.55:
            _do(ms, "append", rng.choice(live), toks(5000 + 40 * step, rng.randrange(1, 12)))
        elif roll < 0.65:  # a lease of the sequence's own prefix (its tail too), held on
            outs = _do(ms, "acquire", rng.choice(live))
            if isinstance(outs[0], Lease):
                leases.append(Pair(outs))
        elif roll < 0.8 and leases:
            _do(ms, "release", leases.pop(rng.randrange(len(leases))))
        else:
            _do(ms, "free", live.pop(rng.randrange(len(live))))
    for seq in live:
        _do(ms, "free", seq)
    for pair in leases:
        _do(ms, "release", pair)
    for m in ms:
        m.close()


@pytest.mark.parametrize("seed", range(3))
def test_foreign_lease_attached_page_by_page_as_by_batches(seed: int) -> None:
    """Another reader's lease attached (the sequence pins its pages for the moment: ``acquire``,
    ``attach``, then ``release`` where it holds a lease of its own on the page, ``release_last``
    elsewhere): fired page by page inside the attach's transaction on one manager, through
    ``fire_batch`` on the other; the same answers and state after every operation."""
    rng = random.Random(seed)
    ms = _twin()
    live: list[str] = []
    for step in range(40):
        name = f"s{step}"
        head = rng.choice(HEADS)[: rng.randrange(1, 31)]
        if rng.random() < 0.3 or not live:
            _do(ms, "register", name, head + toks(3000 + 40 * step, rng.randrange(0, 6)))
            live.append(name)
            continue
        anon = _do(ms, "lookup", head)  # an ownerless lease: an anonymous reader's pins
        if not isinstance(anon[0], Ready):
            continue
        foreign = Pair(out.lease for out in anon)
        _do(ms, "register", name)
        own: Pair | None = None
        if rng.random() < 0.5:  # a lease of the sequence's own on the same pages: ``release`` there
            outs = _do(ms, "lookup", head, owner=name)
            own = Pair(out.lease for out in outs) if isinstance(outs[0], Ready) else None
        _do(ms, "attach", name, foreign)
        for pair in (foreign, own):
            if pair is not None:
                _do(ms, "release", pair)
        _do(ms, "append", name, toks(6000 + 40 * step, rng.randrange(1, 9)))
        live.append(name)
        if rng.random() < 0.4:
            _do(ms, "free", live.pop(rng.randrange(len(live))))
    for seq in live:
        _do(ms, "free", seq)
    for m in ms:
        m.close()


@pytest.mark.parametrize("extra", [1, 2, 3])
def test_an_attached_partial_page_holds_the_tokens_payload(extra: int) -> None:
    """An attach writes its partial page's bytes once, from the lease's copy (``write_prefix``), not
    from its tokens too: the page holds the payload its tokens give at its position (C = 4), the
    slot's tail zero, exactly what the tokens' write and then the copy left."""
    m = CacheManager(config=small_config(gpu_pages=24))
    head = toks(100, 8 + extra)  # two whole pages, then ``extra`` tokens of a third
    m.register("a", head)
    out = m.lookup(head)
    assert isinstance(out, Ready) and out.lease.partial is not None
    m.register("b")
    m.attach("b", out.lease)
    rec = m.parts.pages.records[m.parts.readers.sequence("b").block[-1]]
    assert m.parts.storage.data.read(rec.gpu_slot) == expected_payload(head[8:], 2, 4)
    m.append("b", toks(900, 3))  # the page continued after the copy: its payload still the tokens'
    assert m.parts.storage.data.read(rec.gpu_slot)[: 8 * 4] == expected_payload((head[8:] + toks(900, 3))[:4], 2, 4)
    m.check_integrity()
    m.close()
