"""Room for a write's pages in one go (roombatch.py) against one victim at a time: the same random
workloads on two managers, one of them never batching; after every operation both must have given
the same answer (or refusal) and hold identical state, policy counts included.  The batched moves'
recorded steps conform (the step checker replays them)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import small_config, toks
from test_runtime_conformance import INSTANCE, check_all
from test_runtime_differential import Twin, step

from morphcache.runtime import CacheManager, RuntimeConfig
from morphcache.runtime import prefetch as prefetch_module
from morphcache.runtime import roombatch as roombatch_module
from morphcache.runtime import tiering as tiering_module
from morphcache.runtime.errors import CapacityError
from morphcache.runtime.tiers import SlotPool


class Twins(Twin):
    """``Twin`` with lease numbers left out of refusals (the two managers' leases are numbered apart)."""

    @staticmethod
    def _show(out: Any) -> Any:
        if out[0] == "refused":
            return (*out[:2], re.sub(r"lease #\d+", "lease", out[2]))
        return Twin._show(out)


def counting(monkeypatch: pytest.MonkeyPatch, module: Any = tiering_module) -> list[int]:
    """Count the batches that moved their victims in one go (``make_room_batch`` as ``module`` calls it)."""
    done: list[int] = []
    real = module.make_room_batch

    def batch(tiers: Any, k: int, protect: Any) -> bool:
        ok = real(tiers, k, protect)
        if ok:
            done.append(k)
        return ok

    monkeypatch.setattr(module, "make_room_batch", batch)
    return done


def policy_counts(m: CacheManager) -> tuple[Any, ...]:
    """The seam's counts, the bytes moved, the free slots, and what LRU will propose (its buffered
    touches applied), its clock and its stamps."""
    snap = m.metrics()
    pol = m.parts.seam.policy
    proposals = tuple(tuple(pol.propose(d)) for d in ("gpu", "host", "disk", "pool"))
    return (snap.policy_refusals, dict(snap.policy_victims), dict(snap.bytes_moved), m.parts.storage.slots.free_slots,
            proposals, pol.clock, pol.stamp.tobytes(), pol.pool_stamp.tobytes())


def drive(twin: Twin, rng: random.Random, steps: int, *views: Callable[[CacheManager], Any],
          write: Callable[[Any, random.Random, int, list[str]], None] | None = None, share: float = 0.5,
          keep: int = 4) -> None:
    """``steps`` random operations on both managers, each a write (``write``, ``long_writes`` unless
    given; a ``share`` of them, every one at 1) or one of the differential test's steps; after each, and after each
    free of the oldest sequence kept beyond ``keep``, every one of ``views`` is the same for both."""
    ms, seqs = twin.ms, []

    def same() -> None:
        for view in views:
            assert view(ms[0]) == view(ms[1]), view.__name__

    for i in range(steps):
        if share >= 1 or rng.random() < share:  # (writes only: no draw)
            (write or long_writes)(twin, rng, i, seqs)
        else:
            step(twin, rng, i, seqs)
        same()
        if len(seqs) > keep:
            sid = seqs.pop(0)
            twin.do(lambda m, _: m.free(sid))  # noqa: B023 - called at once
            same()


def long_writes(twin: Twins, rng: random.Random, i: int, seqs: list[str]) -> None:
    """A sequence registered or extended by many pages at once (room for all of them made first)."""
    if seqs and rng.random() < 0.4:
        sid = rng.choice(seqs)
        new = [rng.randrange(50) for _ in range(rng.randrange(12, 40))]
        twin.do(lambda m, _: m.append(sid, new))
        return
    sid = f"w{i}"
    head = toks(1000 * rng.randrange(1, 6), rng.randrange(20, 60))
    twin.do(lambda m, _: m.register(sid, head))
    seqs.append(sid)


def vectors(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    """``on``: a room's moves fired as vector batches however few its victims (else each event alone
    below ``SINGLE_BELOW`` victims, as the small managers here always have)."""
    if on:
        monkeypatch.setattr(roombatch_module, "SINGLE_BELOW", 1)


@pytest.mark.parametrize("seed,disk,vector", [(1, 64, False), (2, 64, True), (5, 64, True), (3, 12, False),
                                              (4, 20, True), (6, 20, False)])
def test_room_in_one_go_is_room_one_victim_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     seed: int, disk: int, vector: bool) -> None:
    done = counting(monkeypatch)
    vectors(monkeypatch, vector)
    ms = []
    for name in ("batched", "single"):
        ms.append(CacheManager(config=small_config(tmp_path / name, gpu_pages=16, host_pages=6, disk_pages=disk,
                                                   pool_capacity=12, prefetch_workers=1)))  # copies land in order
    ms[1].parts.tiers.batchable = False
    twin = Twins(ms[0], ms[1])
    rng = random.Random(seed)
    drive(twin, rng, 90, policy_counts)
    assert done or disk < 64, "no room was made in one go"  # a small disk tier leaves it to one at a time
    for m in ms:
        m.check_integrity()
        m.close()


@pytest.mark.parametrize("vector", [False, True])
def test_batched_moves_conform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vector: bool) -> None:
    done = counting(monkeypatch)
    vectors(monkeypatch, vector)
    opts = {**INSTANCE, "gpu_pages": 8, "host_pages": 4, "disk_pages": 8}
    m = CacheManager(config=RuntimeConfig(**opts, disk_dir=str(tmp_path / "disk"), record=True))
    m.register("a", toks(0, 8))
    m.register("b", toks(100, 8))
    for sid in ("a", "b"):
        for pid in m.sequence_pages(sid)[:2]:
            m.offload(pid, "host")
    m.register("c", toks(200, 16))  # 8 pages: 4 free slots, 4 victims whose room on the host is 4 spills
    assert done == [4]
    steps = m.steps()
    assert {"offload", "offload_done", "spill"} <= {s.event for s in steps}
    assert check_all(m, steps) == []
    m.check_integrity()
    m.close()


@pytest.mark.parametrize("seed", [7, 10, 12])
def test_prefetch_room_in_one_go_is_room_one_slot_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            seed: int) -> None:
    """A recovery's prefetches with the room for all their copies made first, in one go, against each
    copy making its own room: cached prompts pushed off the GPU by other writes, then looked up and
    recovered; the same answers, state and policy counts after every operation."""
    done = counting(monkeypatch, prefetch_module)
    ms = [CacheManager(config=small_config(tmp_path / name, gpu_pages=16, host_pages=10, disk_pages=64,
                                           pool_capacity=60, prefetch_workers=1)) for name in ("batched", "single")]
    ms[1].parts.tiers.batchable = False
    twin = Twins(ms[0], ms[1])
    rng = random.Random(seed)
    prompts = [toks(1000 * (j + 1), rng.randrange(24, 56)) for j in range(3)]
    for i in range(40):
        prompt = rng.choice(prompts)
        if rng.random() < 0.5:  # another write pushes cached pages off the GPU
            sid, other = f"w{i}", toks(50_000 + 100 * i, rng.randrange(16, 48))
            twin.do(lambda m, _: m.register(sid, other))  # noqa: B023
            twin.do(lambda m, _: m.free(sid))  # noqa: B023
            continue
        outs = twin.do(lambda m, _: m.lookup(prompt))  # noqa: B023
        if outs[0][0] == "ok" and outs[0][1].__class__.__name__ == "NeedsRecovery":
            twin.do(lambda m, k: m.recover(outs[k][1].plan).done)  # noqa: B023
        elif outs[0][0] == "ok" and outs[0][1].__class__.__name__ == "Ready":
            twin.do(lambda m, k: m.release(outs[k][1].lease))  # noqa: B023
        if rng.random() < 0.3:
            sid = f"p{i}"
            twin.do(lambda m, _: m.register(sid, prompt))  # noqa: B023
            twin.do(lambda m, _: m.free(sid))  # noqa: B023
        assert policy_counts(ms[0]) == policy_counts(ms[1])
    assert done, "no recovery made its room in one go"
    for m in ms:
        m.check_integrity()
        m.close()


def test_slots_taken_as_a_run_are_taken_one_at_a_time() -> None:
    """``SlotPool.take_many`` hands out the slots ``take`` would, one page at a time, on random gives and
    takes (the same owners and free list after each), and takes nothing when too few are free."""
    rng = random.Random(3)
    for _ in range(40):
        run, single = SlotPool(24), SlotPool(24)
        for i in range(40):
            if run.owner and rng.random() < 0.45:
                slots = rng.sample(sorted(run.owner), rng.randrange(1, len(run.owner) + 1))
                run.give_many(slots)
                single.give_many(slots)
            else:
                pids = [1000 * i + j for j in range(rng.randrange(0, 9))]
                if len(pids) > len(run.free_slots):
                    with pytest.raises(CapacityError):
                        run.take_many(pids)
                else:
                    assert run.take_many(pids) == [single.take(pid) for pid in pids]
            assert (run.owner, run.free_slots) == (single.owner, single.free_slots)
