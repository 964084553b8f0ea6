"""Conformance: every step the runtime executes, recorded as whole views, is checked by the independent
Z3 trace checker against the spec's transition relation."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from rt_helpers import spec_variant, toks

from morphcache.proofs import conformance
from morphcache.runtime import CacheManager, MorphcacheError, NeedsRecovery, Ready, StaleLeaseError, Step
from morphcache.runtime import lookup as lookup_module
from morphcache.runtime import pipeline as pipeline_module

# The checked instance's constants (C=2, W=3, CAPACITY=2, MAX_PIN=2) and views of at most 3 pages keep
# every recorded state inside the domain the spec declares for its instance.
INSTANCE = dict(page_size=2, window=3, pool_capacity=2, max_pin=2, gpu_pages=6, host_pages=3, disk_pages=3)


def check_all(m: CacheManager, steps: list[Step]) -> list[str]:
    bad = []
    for s in steps:
        why = conformance.check_step(m.spec, m.constants, s.before, s.event, s.args, s.after)
        if why is not None:
            bad.append(f"{s.event}{s.args} in {s.view}: {why}")
    return bad


def scenario(m: CacheManager, rng: random.Random) -> None:
    """Touch every kind of event: append/seal/open, compress/index/admit, slide, leases, tiers,
    capture, recovery (prefetch, recompute, compress), evict, drop, release_tail, recompress."""
    m.register("a", toks(0, 6))
    r = m.lookup(toks(0, 6))  # page 0's window slid; a hit at 6 does not need it
    assert isinstance(r, Ready)
    m.read(r.lease)
    m.release(r.lease)
    m.capture(["a"])
    m.uncapture(["a"])
    pages = m.sequence_pages("a")
    m.free("a")
    m.offload(pages[0], "host")
    m.offload(pages[1], "disk")
    for _ in range(2):
        res = m.lookup(toks(0, 6))
        if isinstance(res, NeedsRecovery):
            m.recover(res.plan)
        elif isinstance(res, Ready):
            m.release(res.lease)
    m.register("b", toks(0, 3) + [50, 51])
    for pid in list(m.pooled):
        try:
            m.evict(pid)
        except MorphcacheError:
            pass
    b = m.sequence_pages("b")
    m.recompress(b[0])
    m.build_index(b[0])
    m.release_tail(b[0])
    m.drop(b[1])
    res = m.lookup(toks(0, 3) + [50, 51])
    if isinstance(res, NeedsRecovery):
        m.recover(res.plan)
    m.free("b")
    for i in range(3):
        m.register(f"r{i}", [rng.randrange(4) for _ in range(rng.randrange(1, 7))])
    for i in range(3):
        m.free(f"r{i}")


def random_ops(m: CacheManager, rng: random.Random, ops: int) -> None:
    """Random operations on shared prefixes, refusals tolerated (they change nothing)."""
    heads = [toks(0, 24), toks(0, 8) + toks(90, 16), toks(200, 24)]
    for i in range(ops):
        op = rng.randrange(8)
        pages = sorted(m.page_ids())
        seqs = sorted(m.sequences())
        try:
            if op == 0 or not seqs:
                m.register(f"s{i}", rng.choice(heads)[: rng.randrange(3, 25)])
            elif op == 1:
                res = m.lookup(rng.choice(heads)[: rng.randrange(4, 25)])
                if isinstance(res, NeedsRecovery):
                    m.recover(res.plan)
                elif isinstance(res, Ready):
                    m.release(res.lease)
            elif op == 2:
                m.free(rng.choice(seqs))
            elif op == 3 and pages:
                m.offload(rng.choice(pages), rng.choice(["host", "disk"]))
            elif op == 4 and pages:
                m.prefetch(rng.choice(pages)).result()
            elif op == 5 and pages:
                m.drop(rng.choice(pages))
            elif op == 6:
                m.append(rng.choice(seqs), [rng.randrange(300) for _ in range(rng.randrange(1, 6))])
            elif pages:
                m.evict(rng.choice(pages))
        except MorphcacheError:
            pass


def test_every_recorded_step_conforms(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(record=True, **INSTANCE)
    scenario(m, random.Random(7))
    m.check_integrity()
    steps = m.steps()
    events = {s.event for s in steps}
    assert len(steps) > 100
    assert {"open", "append", "seal", "admit", "slide", "acquire", "read", "release_last", "offload",
            "offload_done", "spill", "prefetch", "copy_done", "verify", "land", "drop", "recompute",
            "evict", "recompress", "release_tail", "capture", "uncapture", "build_index"} <= events
    assert check_all(m, steps) == []


def test_checker_rejects_steps_the_spec_forbids(tmp_path: Path,
                                                make_manager: Callable[..., CacheManager]) -> None:
    """Steps recorded on a weakened spec (offload without the pin check) are flagged against the
    shipped spec; a tampered generation is flagged too."""
    weak = spec_variant(tmp_path, {"objects.tier.events.offload.guard":
                                   "tail[p] in {'sealed', 'released'} and compressed[p] != 'building'"})
    m = make_manager(weak, record=True, **INSTANCE)
    m.register("a", toks(0, 5))
    r = m.lookup(toks(0, 4))
    assert isinstance(r, Ready)
    m.steps()
    m.offload(r.lease.pages[0])
    steps = m.steps()
    shipped = make_manager(**INSTANCE)
    offload = [s for s in steps if s.event == "offload"]
    assert offload
    assert all(conformance.check_step(shipped.spec, shipped.constants, s.before, s.event, s.args, s.after)
               for s in offload)
    done = next(s for s in steps if s.event == "offload_done")
    tampered = dict(done.after)
    key = f"gen[{done.args['p']}]"
    tampered[key] = done.before[key]  # the generation was not bumped
    assert conformance.check_step(shipped.spec, shipped.constants, done.before, done.event, done.args, tampered)


def test_steps_at_runtime_constants(make_manager: Callable[..., CacheManager]) -> None:
    """With the runtime's own page size, window and pool (C=4, W=6, CAPACITY=8, longer sequences)."""
    m = make_manager(record=True)
    random_ops(m, random.Random(11), 60)
    m.check_integrity()
    steps = m.steps()
    assert len(steps) > 150
    probe = next(s for s in steps if s.event == "append" and s.before["frontier[r0]"] > 6)
    assert conformance.check_step(m.spec, m.constants, probe.before, probe.event, probe.args, probe.after) is None
    assert check_all(m, steps) == []


def test_many_readers_sharing_prefixes_conform(make_manager: Callable[..., CacheManager],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Four sequences share one cached prefix (attached from lookups: batches the vector backend
    decides), write on, lease and read their own partial pages; one lease outlives its sequence, one
    has no owner.  Every recorded step, at the runtime's constants (C=4, W=6, CAPACITY=8), is a step
    of the many-reader spec; projections carry the other readers of a page and the reader's block.
    Batches this short would fire one by one; here every batch of two or more goes to the vector backend."""
    monkeypatch.setattr(pipeline_module, "VECTOR_FROM", 2)
    monkeypatch.setattr(lookup_module, "VECTOR_FROM", 2)
    m = make_manager(record=True)
    shared = toks(0, 12)
    m.register("w", shared + [50, 51])
    held = []
    for k, sid in enumerate(("a", "b", "c")):
        m.register(sid)
        r = m.lookup(shared + [90 + k], owner=sid)
        assert isinstance(r, Ready) and r.lease.tokens == 12
        m.attach(sid, r.lease)
        m.release(r.lease)
        m.append(sid, [60 + k] * (2 + k))
        lease = m.acquire(sid)  # whole pages + the partial last page (acquire_tail)
        m.read(lease, payloads=True)
        held.append(lease)
    m.append_batch({"a": [1], "b": [2], "c": [3], "w": [4]})  # one decode step, one vector batch
    anonymous = m.lookup(shared)
    assert isinstance(anonymous, Ready)
    m.kernel_lease([anonymous.lease, held[0]]).check_live()
    m.free("a")  # its lease (and its partial page) outlive it
    m.register("d", shared + [70])  # a fourth sequence, written independently
    with pytest.raises(StaleLeaseError):
        m.read(held[0])  # a's partial page is no longer its own: the spec's read refuses it
    for lease in held + [anonymous.lease]:
        m.release(lease)
    for sid in ("b", "c", "d", "w"):
        m.free(sid)
    m.check_integrity()
    steps = m.steps()
    readers = {s.view for s in steps if s.view.startswith("reader")}
    assert len(readers) >= 5, readers  # w, a, b, c, d (and the anonymous reader)
    events = {s.event for s in steps}
    assert {"register", "attach", "detach", "free", "acquire", "acquire_tail", "read", "release_last", "open",
            "append", "seal", "forget", "admit", "slide"} <= events, events
    assert any(len({k.split("[r")[1].split(",")[0].split("]")[0] for k in s.before if "[r" in k}) >= 3
               for s in steps), "a projection with three readers"
    assert m.parts.pipe.vector_firings > 20  # the fast paths were on while recording
    assert {"acquire", "attach", "read", "release_last", "detach", "append"} <= set(
        m.parts.cspec.memo["plans"] and {name for (name, _), plan in m.parts.cspec.memo["plans"].items() if plan})
    assert check_all(m, steps) == []
