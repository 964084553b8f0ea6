"""Every policy driven by random notification sequences: proposals name only pages the policy was
told are in the decision's tier (never a removed one), each at most once per call, and a fresh,
fully consumed call names every such page; LRU's order is exactly least recently used."""

from __future__ import annotations

from collections.abc import Iterator

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from pol_helpers import TIER_STATES, shipped_policies

from morphcache.runtime.policy import DECISIONS, EvictionPolicy, LRUPolicy, PageMeta

TYPES = ("system", "user", "tool", "response", "reasoning")
SETTINGS = settings(max_examples=40, stateful_step_count=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def in_decision(meta: PageMeta, decision: str) -> bool:
    return meta.pooled if decision == "pool" else meta.tier == decision


class PolicyMachine(RuleBasedStateMachine):
    """Random notifications, random partial consumption of proposals (obeyed, refused or left)."""

    policy_name = "lru"

    def __init__(self) -> None:
        super().__init__()
        self.policy: EvictionPolicy = shipped_policies()[self.policy_name]()
        self.metas: dict[int, PageMeta] = {}
        self.next_pid = 0
        self.now = 0
        self.open: Iterator[int] | None = None
        self.open_decision = ""
        self.open_seen: set[int] = set()

    @initialize()
    def start(self) -> None:
        self.metas.clear()

    def _tick(self) -> int:
        self.now += 1
        return self.now

    @rule(depth=st.integers(0, 12), types=st.frozensets(st.sampled_from(TYPES), max_size=2),
          session=st.sampled_from(["a", "b", None]), task=st.sampled_from(["chat", "agent", None]),
          holders=st.integers(0, 2), sealed=st.booleans(), reuse_id=st.booleans())
    def insert(self, depth: int, types: frozenset[str], session: str | None, task: str | None, holders: int,
               sealed: bool, reuse_id: bool) -> None:
        free = [p for p in range(self.next_pid) if p not in self.metas]
        if reuse_id and free:
            pid = free[0]
        else:
            pid = self.next_pid
            self.next_pid += 1
        meta = PageMeta(pid, depth, tokens=4, types=types, session=session, task=task,
                        writer=f"{session}-{self.now // 5}", created=self._tick(), bytes=64, recovery_tokens=4)
        meta.holders = holders
        meta.hash = hash((depth, types, pid)) if sealed else None
        self.metas[pid] = meta
        self.policy.on_insert(meta)

    @precondition(lambda self: self.metas)
    @rule(data=st.data())
    def access(self, data: st.DataObject) -> None:
        meta = data.draw(st.sampled_from(sorted(self.metas)).map(self.metas.get))
        meta.last_use = self._tick()
        meta.uses += 1
        self.policy.on_access(meta, meta.last_use)

    @precondition(lambda self: self.metas)
    @rule(data=st.data(), what=st.sampled_from(["holders", "pooled", "hash", "types"]))
    def update(self, data: st.DataObject, what: str) -> None:
        meta = data.draw(st.sampled_from(sorted(self.metas)).map(self.metas.get))
        if what == "holders":
            meta.holders = 0 if meta.holders else 1
        elif what == "pooled":
            meta.pooled = not meta.pooled
        elif what == "hash":
            meta.hash = meta.hash if meta.hash is not None else hash(("sealed", meta.page))
        else:
            meta.types = meta.types | {data.draw(st.sampled_from(TYPES))}
        self.policy.on_update(meta)

    @precondition(lambda self: self.metas)
    @rule(data=st.data(), tier=st.sampled_from(TIER_STATES))
    def move(self, data: st.DataObject, tier: str) -> None:
        meta = data.draw(st.sampled_from(sorted(self.metas)).map(self.metas.get))
        if meta.tier == tier:
            return
        old, meta.tier = meta.tier, tier
        self.policy.on_move(meta, old)

    @precondition(lambda self: self.metas)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        meta = self.metas.pop(data.draw(st.sampled_from(sorted(self.metas))))
        self.policy.on_remove(meta)

    @rule(decision=st.sampled_from(DECISIONS))
    def start_proposals(self, decision: str) -> None:
        self.open = self.policy.propose(decision)
        self.open_decision = decision
        self.open_seen = set()

    @precondition(lambda self: self.open is not None)
    @rule(action=st.sampled_from(["obey", "refuse", "leave"]))
    def take_proposal(self, action: str) -> None:
        assert self.open is not None
        pid = next(self.open, None)
        if pid is None:
            self.open = None
            return
        d = self.open_decision
        assert pid in self.metas, f"proposed page {pid} for {d}: never inserted or removed"
        assert in_decision(self.metas[pid], d), f"proposed page {pid} for {d}, not in it"
        assert pid not in self.open_seen, f"page {pid} proposed twice in one call"
        self.open_seen.add(pid)
        meta = self.metas[pid]
        if action == "refuse":
            self.policy.on_refused(d, pid, "pinned")
        elif action == "obey" and d == "pool":
            meta.pooled = False
            self.policy.on_update(meta)
        elif action == "obey":
            old, meta.tier = meta.tier, {"gpu": "offloading", "host": "dropped", "disk": "dropped"}[d]
            self.policy.on_move(meta, old)

    @invariant()
    def fresh_proposals_name_exactly_the_tier(self) -> None:
        for d in DECISIONS:
            gen = self.policy.propose(d)
            got = list(gen)
            assert len(got) == len(set(got)), f"{d}: duplicate proposals {got}"
            want = {p for p, m in self.metas.items() if in_decision(m, d)}
            assert set(got) == want, f"{d}: proposed {sorted(got)}, tier holds {sorted(want)}"


@pytest.mark.parametrize("name", sorted(shipped_policies()))
def test_policy_proposals_are_valid_and_complete(name: str) -> None:
    machine = type(f"{name.title()}Machine", (PolicyMachine,), {"policy_name": name})
    machine.TestCase.settings = SETTINGS
    machine.TestCase().runTest()


class LRUOrderMachine(RuleBasedStateMachine):
    """LRU proposes cold GPU pages, then held ones, each least recently placed or used first; the host,
    disk and pool likewise."""

    def __init__(self) -> None:
        super().__init__()
        self.policy = LRUPolicy()
        self.metas: dict[int, PageMeta] = {}
        self.stamp: dict[int, int] = {}
        self.pool_stamp: dict[int, int] = {}
        self.now = 0
        self.next_pid = 100  # never reused: a removed page's id is not inserted again

    def _t(self) -> int:
        self.now += 1
        return self.now

    @rule(holders=st.integers(0, 1), pooled=st.booleans())
    def insert(self, holders: int, pooled: bool) -> None:
        pid, self.next_pid = self.next_pid, self.next_pid + 2
        meta = PageMeta(pid, 0, created=self.now)
        meta.holders, meta.pooled = holders, pooled
        self.metas[pid] = meta
        self.stamp[pid] = self._t()
        if pooled:
            self.pool_stamp[pid] = self.now
        self.policy.on_insert(meta)

    @precondition(lambda self: self.metas)
    @rule(data=st.data())
    def access(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from(sorted(self.metas)))
        self.stamp[pid] = self._t()
        if self.metas[pid].pooled:
            self.pool_stamp[pid] = self.now
        self.policy.on_access(self.metas[pid], self.now)

    @precondition(lambda self: self.metas)
    @rule(data=st.data(), what=st.sampled_from(["holders", "pooled"]))
    def update(self, data: st.DataObject, what: str) -> None:
        pid = data.draw(st.sampled_from(sorted(self.metas)))
        meta = self.metas[pid]
        if what == "holders":
            meta.holders = 1 - meta.holders
            if meta.tier == "gpu":
                self.stamp[pid] = self._t()
        else:
            meta.pooled = not meta.pooled
            self.stamp[pid] = self._t()
            if meta.pooled:
                self.pool_stamp[pid] = self.now
            else:
                self.pool_stamp.pop(pid, None)
        self.policy.on_update(meta)

    @precondition(lambda self: self.metas)
    @rule(data=st.data(), tier=st.sampled_from(["gpu", "host", "disk", "dropped"]))
    def move(self, data: st.DataObject, tier: str) -> None:
        pid = data.draw(st.sampled_from(sorted(self.metas)))
        meta = self.metas[pid]
        if meta.tier != tier:
            old, meta.tier = meta.tier, tier
            self.stamp[pid] = self._t()
            self.policy.on_move(meta, old)

    @precondition(lambda self: self.metas)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from(sorted(self.metas)))
        self.policy.on_remove(self.metas.pop(pid))
        self.pool_stamp.pop(pid, None)

    @invariant()
    def order_is_least_recent_first(self) -> None:
        def by_stamp(pids: list[int], stamps: dict[int, int]) -> list[int]:
            return sorted(pids, key=stamps.__getitem__)

        m = self.metas
        cold = by_stamp([p for p in m if m[p].tier == "gpu" and not m[p].holders], self.stamp)
        hot = by_stamp([p for p in m if m[p].tier == "gpu" and m[p].holders], self.stamp)
        assert list(self.policy.propose("gpu")) == cold + hot
        for tier in ("host", "disk"):
            assert list(self.policy.propose(tier)) == by_stamp([p for p in m if m[p].tier == tier], self.stamp)
        assert list(self.policy.propose("pool")) == by_stamp([p for p in m if m[p].pooled], self.pool_stamp)


def test_lru_order() -> None:
    LRUOrderMachine.TestCase.settings = SETTINGS
    LRUOrderMachine.TestCase().runTest()
