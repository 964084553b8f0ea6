"""A long write for one sequence (``register`` with a prompt, ``append`` of a chunk spanning many pages:
its pages written, its slides and its sealed pages' morphology proposed in bulk) against the same
tokens written page by page, or token by token, on a twin manager: the same state, the same refusals,
integrity after every write; a refused chunk changes nothing; its recorded steps conform to the spec."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest
from rt_helpers import toks
from test_runtime_conformance import check_all
from test_runtime_decode import SHARED, attached, refusal, renamed

from morphcache.runtime import CacheManager
from morphcache.runtime import lookup as lookup_module
from morphcache.runtime import pipeline as pipeline_module

C = 4  # the small configuration's page size


def pieces(start: int, chunk: list[int], mode: str) -> list[list[int]]:
    """``chunk`` written at ``start`` cut at every page boundary (``page``) or into single tokens."""
    if mode == "token":
        return [[t] for t in chunk]
    out, i, pos = [], 0, start
    while i < len(chunk):
        take = min(C - pos % C, len(chunk) - i)
        out.append(chunk[i:i + take])
        i, pos = i + take, pos + take
    return out


def piecewise(m: CacheManager, sid: str, chunk: list[int], mode: str) -> tuple[str, str] | None:
    """The chunk appended piece by piece; the first refusal (the pieces after it not tried)."""
    for piece in pieces(m.frontier(sid), chunk, mode):
        got = refusal(m.append, sid, piece)
        if got is not None:
            return got
    return None


def compared(m: CacheManager, mode: str) -> dict[str, object]:
    """What both paths must agree on: ``renamed`` less the refusals counted inside batches (a firing a
    batch refused on its own is no refusal of the call), and, token by token, the write counts (one a
    call)."""
    d = renamed(m)
    del d["refused"]
    if mode == "token":
        for st in d["pages"].values():  # type: ignore[attr-defined]
            del st["meta_uses"]
    return d


@pytest.mark.parametrize(("seed", "mode", "vector_from", "blind"), [(1, "page", 2, False), (2, "token", 2, False),
                                                                   (3, "page", 16, False), (4, "token", 2, True)])
def test_chunk_matches_pieces(make_manager: Callable[..., CacheManager], monkeypatch: pytest.MonkeyPatch,
                              seed: int, mode: str, vector_from: int, blind: bool) -> None:
    """Random prompts and chunks (up to a dozen pages, starting at every phase of a page) for sequences
    started fresh or from a shared cached prefix (whose windows other holders keep), some captured (a
    chunk then refused at its first open), some freed and replaced: both managers agree after every
    write.  The GPU pool and the reuse pool are large enough that no page is moved or evicted to make
    room (the victims would depend on the policy's clock, which ticks once a call).  ``blind``: every
    window a chunk's slides pass looks slidable, so their batches are refused (a window another holder
    keeps) and the walk decides."""
    monkeypatch.setattr(pipeline_module, "VECTOR_FROM", vector_from)
    monkeypatch.setattr(lookup_module, "VECTOR_FROM", vector_from)
    opts = dict(gpu_pages=3000, pool_capacity=3000, host_pages=0, window=6, max_sequence_tokens=400)
    batched, single = make_manager(disk=False, **opts), make_manager(disk=False, **opts)
    if blind:
        monkeypatch.setattr(batched.parts.morph, "may_slide", lambda reader, pids: np.ones(len(pids), dtype=bool))
    rng = random.Random(seed)
    for m in (batched, single):
        m.register("w", SHARED + [5])
    seqs = ["w"]
    refused = 0
    for i in range(30):
        sid = f"s{i}"
        if rng.random() < 0.3:
            for m in (batched, single):
                attached(m, sid, 0)
        else:
            prompt = [rng.randrange(50) for _ in range(rng.randrange(0, 40))]
            got = refusal(batched.register, sid, prompt)
            single.register(sid)
            assert got == piecewise(single, sid, prompt, mode), i
        seqs.append(sid)
        if rng.random() < 0.2:  # capture a sequence at a page boundary: its next chunk's open is refused
            at = [s for s in seqs if batched.frontier(s) % C == 0]
            if at:
                who = rng.choice(at)
                for m in (batched, single):
                    refusal(m.capture, [who])
        for _ in range(3):
            who = rng.choice(seqs[1:])  # the shared prefix's writer keeps its windows (attach needs them)
            chunk = [rng.randrange(50) for _ in range(rng.randrange(1, 50))]
            if batched.frontier(who) + len(chunk) > 400:
                continue
            if batched.parts.readers.sequence(who).rid in captured(batched) and batched.frontier(who) % C:
                continue  # refused at a later open: checked on its own below (the pieces would commit)
            got = refusal(batched.append, who, chunk)
            want = piecewise(single, who, chunk, mode)
            assert got == want, (i, got, want)
            refused += got is not None
        if rng.random() < 0.2 and len(seqs) > 2:
            gone = seqs.pop(rng.randrange(1, len(seqs)))
            for m in (batched, single):
                refusal(m.uncapture, [gone])
                m.free(gone)
        assert compared(batched, mode) == compared(single, mode), i
        batched.check_integrity()
        single.check_integrity()
    fired = batched.metrics().events_fired
    assert refused and all(fired.get(e, 0) for e in ("open", "seal", "slide", "admit", "build_index", "attach"))
    assert not any(fired.get(e, 0) for e in ("drop", "offload", "evict"))


def captured(m: CacheManager) -> set[int]:
    """The readers whose batch is captured (their opens refused)."""
    store, dec = m.parts.pipe.store, m.parts.cspec.decode
    return {rid for rid in m.parts.readers.by_rid if dec("graph", store.reader("graph", rid)) != "idle"}


def test_refused_chunk_changes_nothing(make_manager: Callable[..., CacheManager]) -> None:
    """A chunk refused at a later page's open (the sequence captured mid-page) leaves every page, the
    index, the pool and the policy's view as they were, and the manager whole."""
    m = make_manager(disk=False, gpu_pages=200, pool_capacity=200, host_pages=0)
    m.register("a", toks(0, 22))
    m.capture(["a"])
    before = renamed(m)
    got = refusal(m.append, "a", toks(100, 30))
    assert got is not None and got[0] == "TopologyError"  # the open of page 6: graph captured
    after = renamed(m)
    del before["refused"], after["refused"]
    assert after == before
    m.check_integrity()
    m.uncapture(["a"])
    assert m.append("a", toks(100, 30)) == 52
    m.check_integrity()


def test_chunks_conform(make_manager: Callable[..., CacheManager], monkeypatch: pytest.MonkeyPatch) -> None:
    """Long prompts and chunks, sequences sharing a prefix, every batch of two or more decided by the
    vector backend: every recorded step is a step of the spec (C=4, W=6, CAPACITY=8: admissions evict)."""
    monkeypatch.setattr(pipeline_module, "VECTOR_FROM", 2)
    monkeypatch.setattr(lookup_module, "VECTOR_FROM", 2)
    m = make_manager(record=True, disk=False, gpu_pages=40, host_pages=0)
    m.register("w", SHARED + [5])
    rng = random.Random(7)
    for i in range(2):
        attached(m, f"a{i}", rng.randrange(10, 20))
        m.register(f"r{i}", [rng.randrange(50) for _ in range(rng.randrange(20, 30))])
        m.append(f"r{i}", [rng.randrange(50) for _ in range(rng.randrange(10, 20))])
        m.free(f"r{i}")
    m.check_integrity()
    steps = m.steps()
    assert {"open", "append", "seal", "slide", "begin_compress", "finish_compress", "build_index",
            "admit", "evict"} <= {s.event for s in steps}
    assert m.parts.pipe.vector_firings > 20
    assert check_all(m, steps) == []
