"""The fast paths against the general path: the same random workloads on two managers, one deciding
batches with the vector backend, quantifiers incrementally and readiness column-wise (``fast=True``),
the other firing every event alone with the closures (``fast=False``).  After every operation both
must have given the same answer (or the same refusal) and hold identical state."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from rt_helpers import digest, toks

from morphcache.runtime import CacheManager, Lease, MorphcacheError, NeedsRecovery, Ready
from morphcache.runtime import lookup as lookup_module
from morphcache.runtime import morphology as morphology_module
from morphcache.runtime import pipeline as pipeline_module

HEADS = [toks(0, 40), toks(0, 12) + toks(500, 30), toks(900, 36)]


class Twin:
    """One operation applied to both managers; answers compared, then the states."""

    def __init__(self, fast: CacheManager, general: CacheManager) -> None:
        self.ms = (fast, general)
        self.leases: list[tuple[Lease, Lease]] = []

    def do(self, op: Callable[[CacheManager, int], Any]) -> Any:
        outs = []
        for i, m in enumerate(self.ms):
            try:
                outs.append(("ok", op(m, i)))
            except MorphcacheError as exc:
                outs.append(("refused", type(exc).__name__, str(exc)))
        shown = [self._show(o) for o in outs]
        assert shown[0] == shown[1], shown
        for m in self.ms:
            m.wait_prefetches()
        a, b = (digest(m) for m in self.ms)
        for key in a:
            assert a[key] == b[key], key
        self.ms[0].check_integrity()
        return outs

    @staticmethod
    def _show(out: Any) -> Any:
        if out[0] != "ok":
            return out
        value = out[1]
        if isinstance(value, Ready):
            return ("ready", value.nominal, value.lease.tokens, value.lease.pages)
        if isinstance(value, NeedsRecovery):
            return ("recover", value.plan)
        if isinstance(value, Lease):
            return ("lease", value.pages, value.tail, value.tokens)
        return value


def workload(twin: Twin, rng: random.Random, steps: int) -> None:
    """Random operations on shared prefixes; every random draw happens before the operation (both
    managers must see the same arguments)."""
    seqs: list[str] = []
    for i in range(steps):
        step(twin, rng, i, seqs)


def step(twin: Twin, rng: random.Random, i: int, seqs: list[str]) -> None:  # noqa: C901 - one case per op
    """One random operation."""
    op = rng.randrange(12)
    head = rng.choice(HEADS)
    if op <= 1 or not seqs:
        sid = f"s{i}"
        n = rng.randrange(1, len(head))
        twin.do(lambda m, _: m.register(sid, head[:n]))
        seqs.append(sid)
    elif op == 2:
        sid = f"a{i}"
        n = rng.randrange(4, len(head))
        owner = sid if rng.random() < 0.5 else None
        outs = twin.do(lambda m, _: m.lookup(head[:n] + [7777], owner=owner))
        res = [o[1] for o in outs if o[0] == "ok"]
        if len(res) == 2 and isinstance(res[0], Ready):
            if rng.random() < 0.7:
                twin.do(lambda m, _: m.register(sid))
                twin.do(lambda m, k: m.attach(sid, res[k].lease))
                seqs.append(sid)
            twin.leases.append((res[0].lease, res[1].lease))
        elif len(res) == 2 and isinstance(res[0], NeedsRecovery):
            twin.do(lambda m, k: m.recover(res[k].plan).done)
    elif op == 3:
        sid = rng.choice(seqs)
        new = [rng.randrange(50) for _ in range(rng.randrange(1, 9))]
        twin.do(lambda m, _: m.append(sid, new))
    elif op == 4:
        batch = {sid: [rng.randrange(50)] for sid in seqs}
        twin.do(lambda m, _: m.append_batch(batch))
    elif op == 5 and seqs:
        sid = seqs.pop(rng.randrange(len(seqs)))
        twin.do(lambda m, _: m.free(sid))
    elif op == 6 and seqs:
        sid = rng.choice(seqs)
        outs = twin.do(lambda m, _: m.acquire(sid))
        if outs[0][0] == "ok":
            twin.leases.append((outs[0][1], outs[1][1]))
    elif op == 7 and twin.leases:
        pair = twin.leases[rng.randrange(len(twin.leases))]
        twin.do(lambda m, k: m.read(pair[k], payloads=True).payloads)
    elif op == 8 and twin.leases:
        pair = twin.leases.pop(rng.randrange(len(twin.leases)))
        twin.do(lambda m, k: m.release(pair[k]))
    elif op == 9:
        pages = sorted(twin.ms[0].page_ids())
        if pages:
            pid = rng.choice(pages)
            action = rng.choice(["host", "disk", "prefetch", "drop", "evict"])
            if action in ("host", "disk"):
                twin.do(lambda m, _: m.offload(pid, action))
            elif action == "prefetch":
                twin.do(lambda m, _: m.prefetch(pid).result())
            elif action == "drop":
                twin.do(lambda m, _: m.drop(pid))
            else:
                twin.do(lambda m, _: m.evict(pid))
    elif op == 10 and seqs:
        sid = rng.choice(seqs)
        on = rng.random() < 0.5
        twin.do(lambda m, _: (m.capture if on else m.uncapture)([sid]))
    elif op == 11:
        cut = rng.randrange(1, len(head))
        twin.do(lambda m, _: m.probe(head[:cut]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_and_general_paths_agree(make_manager: Callable[..., CacheManager], seed: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline_module, "VECTOR_FROM", 2)  # every batch of two or more: the vector backend
    monkeypatch.setattr(lookup_module, "VECTOR_FROM", 2)
    monkeypatch.setattr(morphology_module, "SLIDE_BATCH_FROM", 8)  # slides far behind: a batch first
    # one copy worker: copies land in the order they started on both (the LRU order depends on it)
    opts = dict(gpu_pages=40, host_pages=10, disk_pages=10, pool_capacity=20, window=8, prefetch_workers=1)
    twin = Twin(make_manager(**opts), make_manager(fast=False, **opts))
    workload(twin, random.Random(seed), 160)
    fired = twin.ms[0].metrics().events_fired
    assert fired.get("attach", 0) and fired.get("acquire", 0) and fired.get("read", 0), fired
    assert twin.ms[0].parts.pipe.vector_firings > 0  # the fast manager decided batches column-wise
    assert twin.ms[1].parts.pipe.vector_firings == 0
