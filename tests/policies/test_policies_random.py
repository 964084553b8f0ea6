"""Every shipped policy behind the CacheManager on random typed workloads, ``check_integrity()`` after
every step and every read's bytes checked; a bad policy that proposes pinned, in-flight and captured
pages is refused and counted at every decision, and nothing it proposed is moved or read stale.

The random driver mixes what an engine does (typed requests of sessions that grow, served by lookup,
recovery, attach and append; leases held across steps and read; sequences captured for graph
replay and freed) with explicit tier moves (offload, prefetch, drop), on tiers small enough that
every step needs victims::

    step      new request | acquire | read | release | free | capture / uncapture | offload | prefetch | drop
    after     check_integrity(); the policy's notifications checked by ContractPolicy
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pol_helpers import UNKNOWN_PAGE, BadPolicy, ContractPolicy, shipped_policies

import morphcache.runtime.tiers as tiers_module
from morphcache.runtime import (
    CacheManager,
    CapacityError,
    EvictionPolicy,
    GuardRefused,
    Lease,
    NeedsRecovery,
    Ready,
    RuntimeConfig,
    expected_payload,
)
from morphcache.workloads.typed import clip_spans

C = 4
ALLOWED = (GuardRefused, CapacityError)  # a refusal leaves the state as it was (all or none)
SYSTEMS = [list(range(1, 11)), list(range(1, 6)) + list(range(40, 47)), list(range(60, 67))]
Span = tuple[int, int, str]


def _manager(tmp: Path, policy: EvictionPolicy, gpu: int = 12) -> CacheManager:
    return CacheManager(config=RuntimeConfig(page_size=C, window=6, gpu_pages=gpu, host_pages=4, disk_pages=4,
                                             disk_dir=str(tmp / "disk"), pool_capacity=14, policy=policy))


def _check_read(m: CacheManager, lease: Lease, tokens: list[int]) -> None:
    """The lease's pages hold exactly the bytes of the tokens it covers (the tail: its leased tokens)."""
    view = m.read(lease, payloads=True)
    assert view.payloads is not None
    per_token = len(expected_payload([], 0, C)) // C
    for depth, payload in enumerate(view.payloads):
        lo, hi = depth * C, min((depth + 1) * C, lease.tokens)
        want = expected_payload(tokens[lo:hi], depth, C)[: (hi - lo) * per_token]
        assert payload[: (hi - lo) * per_token] == want, f"block {depth} of {lease!r}"


class Driver:
    """Random typed traffic on one manager (see the module docstring)."""

    def __init__(self, m: CacheManager, seed: int) -> None:
        self.m, self.rng = m, random.Random(seed)
        self.n = 0
        self.history: dict[str, tuple[list[int], list[Span]]] = {}  # session -> its conversation so far
        self.live: dict[str, list[int]] = {}  # sequence -> its tokens
        self.captured: set[str] = set()
        self.leases: list[tuple[Lease, list[int]]] = []

    def request(self) -> None:
        rng, m = self.rng, self.m
        session = f"s{rng.randrange(6)}"
        tokens, spans = self.history.get(session) or (list(SYSTEMS[rng.randrange(3)]), [])
        spans = spans or [(0, len(tokens), "system")]
        kind = rng.choice(["user", "tool", "document"])
        new = [rng.randrange(100, 200) for _ in range(rng.randint(1, 9))]
        prompt, spans = tokens + new, [*spans, (len(tokens), len(tokens) + len(new), kind)]
        self.n += 1
        sid = f"r{self.n}"
        m.register(sid, session=session, task="agent" if kind == "tool" else "chat")
        res = m.lookup(prompt, owner=sid)
        if isinstance(res, NeedsRecovery):
            try:
                m.recover(res.plan)
            except ALLOWED:
                pass
            res = m.lookup(prompt, owner=sid)
            if isinstance(res, NeedsRecovery):
                res = m.lookup(prompt, limit=res.plan.effective, owner=sid)
        served = 0
        try:
            if isinstance(res, Ready):
                served = res.lease.tokens
                try:
                    m.attach(sid, res.lease, types=clip_spans(spans, 0, served))
                finally:
                    m.release(res.lease)
            m.append(sid, prompt[served:], types=clip_spans(spans, served, len(prompt)))
            reply = [rng.randrange(200, 250) for _ in range(rng.randint(1, 6))]
            m.append(sid, reply, types=[(0, len(reply), "response")])
        except ALLOWED:
            m.free(sid)
            return
        self.live[sid] = prompt + reply
        self.history[session] = (prompt + reply, [*spans, (len(prompt), len(prompt) + len(reply), "response")])
        if rng.random() < 0.6:
            m.free(sid)
            del self.live[sid]

    def step(self) -> None:
        rng, m = self.rng, self.m
        op = rng.choice(["request"] * 4 + ["acquire", "read", "release", "free", "capture", "tier"])
        free = [s for s in self.live if s not in self.captured]
        if op == "request" or not self.live:
            self.request()
        elif op == "acquire" and len(self.leases) < 3:
            sid = rng.choice(sorted(self.live))
            try:
                self.leases.append((m.acquire(sid), list(self.live[sid])))
            except ALLOWED:
                pass
        elif op == "read" and self.leases:
            _check_read(m, *rng.choice(self.leases))
        elif op == "release" and self.leases:
            m.release(self.leases.pop(rng.randrange(len(self.leases)))[0])
        elif op == "free" and free:
            sid = rng.choice(sorted(free))
            for lease, _ in [x for x in self.leases if x[0].owner == sid]:  # as an engine does: its leases first
                m.release(lease)
                self.leases = [x for x in self.leases if x[0] is not lease]
            m.free(sid)
            del self.live[sid]
        elif op == "capture":
            if self.captured:
                m.uncapture(sorted(self.captured))
                self.captured.clear()
            elif free:
                sid = rng.choice(sorted(free))
                m.capture([sid])
                self.captured.add(sid)
        elif op == "tier" and m.page_ids():
            pid = rng.choice(sorted(m.page_ids()))
            try:
                tier = m.page_state(pid)["tier"]
                if tier == "gpu":
                    m.offload(pid, rng.choice(["host", "disk"]))
                elif tier in ("host", "disk"):
                    m.prefetch(pid).result() if rng.random() < 0.7 else m.drop(pid)
            except ALLOWED:
                pass

    def finish(self) -> None:
        m = self.m
        for lease, tokens in self.leases:
            _check_read(m, lease, tokens)
            m.release(lease)
        if self.captured:
            m.uncapture(sorted(self.captured))
        for sid in self.live:
            m.free(sid)
        m.check_integrity()


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", sorted(shipped_policies()))
def test_random_typed_workload_keeps_integrity_at_every_step(name: str, seed: int, tmp_path: Path) -> None:
    policy = ContractPolicy(shipped_policies()[name]())
    with _manager(tmp_path, policy) as m:
        driver = Driver(m, seed)
        for _ in range(70):
            driver.step()
            m.check_integrity()
        driver.finish()
        snap = m.metrics()
        assert snap.policy_victims.get("gpu", 0) > 0 and snap.policy_victims.get("host", 0) > 0
        assert policy.proposals >= sum(snap.policy_victims.values())
        types = {t for pid in m.page_ids() for t in m.page_state(pid)["meta"].types}
        assert {"system", "response"} <= types


def test_bad_policy_is_refused_every_time_on_pinned_in_flight_and_captured_pages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    targets: list[int] = []
    bad = BadPolicy(lambda: list(targets))
    with _manager(tmp_path, bad, gpu=10) as m:
        m.register("pinned", SYSTEMS[0], types=[(0, 10, "system")])
        pinned = m.acquire("pinned")  # whole pages and the partial last one
        m.register("captured", SYSTEMS[2] + [7, 8], session="g", task="decode")
        captured = m.acquire("captured")
        m.capture(["captured"])  # a decode batch captured for graph replay, holding its lease
        m.register("w", [300 + i for i in range(8)])
        m.free("w")  # two cold pooled pages; one goes to the host and is prefetched, blocked in flight
        flying = m.cached_pages()[-1]
        m.offload(flying, "host")
        started, go = threading.Event(), threading.Event()
        real_get = tiers_module.HostTier.get

        def slow_get(self: Any, page: int) -> Any:
            if page == flying:
                started.set()
                go.wait(30)
            return real_get(self, page)

        monkeypatch.setattr(tiers_module.HostTier, "get", slow_get)
        fut = m.prefetch(flying)
        assert started.wait(30)
        targets.extend([*pinned.pinned, *captured.pinned, flying])
        for i in range(6):  # new sequences need GPU slots and host room: decisions with every target first
            sid = f"p{i}"
            m.register(sid, [400 + 10 * i + j for j in range(9)], types=[(0, 9, "user")])
            m.free(sid)
            m.check_integrity()
            assert m.page_state(flying)["tier"] == "prefetching"
        targets.remove(flying)
        go.set()
        fut.result()
        assert m.page_state(flying)["tier"] == "gpu"
        _check_read(m, pinned, SYSTEMS[0])
        _check_read(m, captured, SYSTEMS[2] + [7, 8])
        m.uncapture(["captured"])
        m.release(pinned)
        m.release(captured)
        m.check_integrity()
    asked = [d for d in bad.decisions if d[1]]
    assert {d for d, _ in asked} >= {"gpu", "host"}
    refused = Counter((d, p) for d, p, _ in bad.refused)
    proposed = Counter((d, p) for d, ps in asked for p in ps)
    for key, times in proposed.items():  # refused at every decision that proposed it (and again when it
        assert refused[key] >= times, key  # came back among the pages of other tiers)
    reasons = {r for _, p, r in bad.refused if p == flying}
    assert reasons and reasons <= {"not in tier", "in flight"}
    assert any(p == UNKNOWN_PAGE for _, p, _ in bad.refused)
    assert m.metrics().policy_refusals == len(bad.refused)
