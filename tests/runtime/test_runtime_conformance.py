"""Conformance: every step the runtime executes, recorded as whole views, is checked by the independent
Z3 trace checker against the spec's transition relation."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from rt_helpers import spec_variant, toks

from morphcache.proofs import conformance
from morphcache.runtime import CacheManager, MorphcacheError, NeedsRecovery, Ready, Step

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
