"""A decode step (``append_batch``: one token for each of many sequences, written by kind in batched
transactions) against the same tokens appended one sequence at a time: the same state, the same
refusals, integrity after every step; and its recorded steps conform to the spec."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import digest, spec_variant, toks
from test_runtime_conformance import check_all

from morphcache.runtime import CacheManager, MorphcacheError, Ready
from morphcache.runtime import lookup as lookup_module
from morphcache.runtime import pipeline as pipeline_module

SHARED = toks(0, 12)
SEAL_IDLE = ("block[r, p] == 'in' and frontier[r] == depth[p] * C + fill[p] and fill[p] == C - 1 and tier[p] == 'gpu' "
             "and graph[r] == 'idle'")


def attached(m: CacheManager, sid: str, extra: int) -> None:
    """A sequence started from the cached shared prefix (its pages shared), then ``extra`` tokens."""
    m.register(sid)
    res = m.lookup(SHARED + [999], owner=sid)
    if isinstance(res, Ready):
        m.attach(sid, res.lease)
        m.release(res.lease)
    else:  # the prefix's windows slid and a captured holder keeps them from being recomputed
        m.append(sid, SHARED)
    if extra:
        m.append(sid, toks(300, extra))


def start(m: CacheManager, rng: random.Random, n: int) -> list[str]:
    """The shared prefix's writer and ``n`` sequences, a third of them attached to it, at every phase of
    a page (their lengths drawn from ``rng``)."""
    m.register("w", SHARED + [5])
    seqs = ["w"]
    for i in range(n):
        sid, extra = f"s{i}", rng.randrange(0, 9)
        if i % 3 == 0:
            attached(m, sid, extra)
        else:
            m.register(sid, [rng.randrange(40) for _ in range(extra + 1)])
        seqs.append(sid)
    return seqs


def renamed(m: CacheManager) -> dict[str, Any]:
    """``digest`` with every page id replaced by (the sequence that wrote it, its block index): the two
    paths may take fresh ids and GPU slots in another order (a step's opens come before its seals'
    admissions, whose evictions may free ids), so what counts an id's history (its generation, and the
    generations leases recorded) is left out."""
    name = {pid: (m.parts.pages.get(pid).meta.writer, m.parts.pages.get(pid).meta.depth) for pid in m.page_ids()}
    d = digest(m)
    pages = {}
    for pid, st in d["pages"].items():
        del st["gpu_slot"], st["gen"]
        pages[name[pid]] = st
    readers = {}
    for rid, (seq, block, values) in d["readers"].items():
        values = {k: ({name[q]: x for q, x in v.items()} if isinstance(v, dict) else v) for k, v in values.items()
                  if k != "lgen"}
        readers[rid] = (seq, tuple(name[q] for q in block), values)
    leases = sorted((lease[0], tuple(name[q] for q in lease[1]), *lease[3:]) for lease in d["leases"])
    return {**d, "pages": pages, "readers": readers, "leases": leases, "pooled": sorted(name[q] for q in d["pooled"]),
            "index": {h: name[q] for h, q in d["index"].items()}}


def windows(d: dict[str, Any]) -> set[Any]:
    """The pages whose window has slid."""
    return {pid for pid, st in d["pages"].items() if st["window"] == "expired"}


def refusal(op: Callable[..., Any], *args: Any) -> tuple[str, str] | None:
    """The refusal ``op(*args)`` raised (a page named by its block index only), or None."""
    try:
        op(*args)
    except MorphcacheError as exc:
        return type(exc).__name__, re.sub(r"page \d+ \(block", "page (block", str(exc))
    return None


def one_by_one(m: CacheManager, batch: dict[str, list[int]]) -> tuple[str, str] | None:
    """Each sequence's tokens appended on their own; the first refusal (as append_batch reports it)."""
    found = [refusal(m.append, sid, t) for sid, t in batch.items()]
    return next((f for f in found if f is not None), None)


@pytest.mark.parametrize(("seed", "vector_from", "sealing_idle"), [(1, 2, False), (2, 2, False), (3, 16, False),
                                                                  (4, 2, False), (5, 2, True)])
def test_append_batch_matches_one_by_one(make_manager: Callable[..., CacheManager], monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path, seed: int, vector_from: int, sealing_idle: bool) -> None:
    """Random decode steps over sequences at every phase of a page, some sharing a prefix, some
    captured (their opens refused; with ``sealing_idle``, a spec whose ``seal`` also asks the reader's
    graph idle, their seals too: the step's sealing part refused alone), some at their length limit,
    some given several tokens, some freed and replaced: both managers agree after every step.  The pool
    admits in another order (a kind refused as a whole, and longer runs, come after the batched kinds),
    so it is compared as a set and made large enough that no admission evicts (the victim would depend
    on that order)."""
    monkeypatch.setattr(pipeline_module, "VECTOR_FROM", vector_from)
    monkeypatch.setattr(lookup_module, "VECTOR_FROM", vector_from)
    opts = dict(gpu_pages=400, pool_capacity=400, host_pages=0, window=6, max_sequence_tokens=44)
    spec = spec_variant(tmp_path, {"objects.tail.events.seal.guard": SEAL_IDLE}) if sealing_idle else None
    batched, single = make_manager(spec, disk=False, **opts), make_manager(spec, disk=False, **opts)
    rng = random.Random(seed)
    seqs = start(batched, random.Random(seed), 14)
    start(single, random.Random(seed), 14)
    refused = 0
    for i in range(40):
        if rng.random() < 0.25:  # capture or uncapture one sequence on both
            sid, on = rng.choice(seqs), rng.random() < 0.5
            for m in (batched, single):
                refusal(m.capture if on else m.uncapture, [sid])
        if rng.random() < 0.15:  # a sequence ends, another starts from the shared prefix
            gone = seqs.pop(rng.randrange(1, len(seqs)))
            for m in (batched, single):
                refusal(m.free, gone)
                attached(m, f"n{i}", 0)
            seqs.append(f"n{i}")
        chosen = [sid for sid in seqs if rng.random() < 0.9]
        batch = {sid: [rng.randrange(60) for _ in range(1 if rng.random() < 0.9 else rng.randrange(2, 4))]
                 for sid in chosen}
        got = refusal(batched.append_batch, batch)
        want = one_by_one(single, batch)
        assert got == want, (i, got, want)
        refused += got is not None
        a, b = renamed(batched), renamed(single)
        # slides are proposals decided against the frontiers reached so far: when every sequence takes one
        # token and none is refused, the step's seals slide behind the frontiers the whole step reached,
        # one by one a seal only behind those of the sequences before it (the same windows or more); a
        # kind refused as a whole, or a longer run, comes after the batched kinds (not before)
        if got is None and all(len(t) == 1 for t in batch.values()):
            assert windows(b) <= windows(a), i
        for key in a:  # "refused": a firing the vector backend refused on its own is not a single refusal
            if key not in ("refused", "fired", "pages"):
                assert a[key] == b[key], (i, key)
        for m in (batched, single):  # every window the spec now lets slide, on both
            for sid in seqs:
                m.slide(sid)
        a, b = renamed(batched), renamed(single)
        for key in a:
            if key != "refused":
                assert a[key] == b[key], (i, key)
        batched.check_integrity()
        single.check_integrity()
    fired = batched.metrics().events_fired
    assert refused and all(fired.get(e, 0) for e in ("open", "seal", "slide", "admit", "build_index", "free"))


def test_decode_steps_conform(make_manager: Callable[..., CacheManager], monkeypatch: pytest.MonkeyPatch) -> None:
    """Decode steps over sequences sharing a prefix, every batch of two or more decided by the vector
    backend: every recorded step is a step of the spec (C=4, W=6, CAPACITY=8)."""
    monkeypatch.setattr(pipeline_module, "VECTOR_FROM", 2)
    monkeypatch.setattr(lookup_module, "VECTOR_FROM", 2)
    m = make_manager(record=True, disk=False, gpu_pages=40, host_pages=0)
    seqs = start(m, random.Random(5), 5)
    m.steps()
    rng = random.Random(6)
    for _ in range(9):
        m.append_batch({sid: [rng.randrange(60)] for sid in seqs})
    m.check_integrity()
    steps = m.steps()
    assert {"open", "append", "seal", "slide", "begin_compress", "finish_compress", "build_index",
            "admit"} <= {s.event for s in steps}
    assert m.parts.pipe.vector_firings > 20
    assert check_all(m, steps) == []
