"""Policy pieces one at a time: the name registry, the cost model, the semantic and FLOP orders, the
online estimators, SAECache's routing, and its learning direction in the policy simulator."""

from __future__ import annotations

import math
import random

import pytest
from pol_sim import simulate

from morphcache.policies import CostModel, FlopAwarePolicy, SAECachePolicy, SemanticPolicy
from morphcache.policies.learning import OnlineLogNormal, Outcome, ReuseModel
from morphcache.runtime import ConfigError
from morphcache.runtime.policy import LRUPolicy, PageMeta, make_policy, policy_names
from morphcache.workloads import agentic, multi_turn_chat, templated


def _page(pid: int, depth: int = 0, types: frozenset[str] = frozenset(), **kw: object) -> PageMeta:
    meta = PageMeta(pid, depth, tokens=16, types=types, bytes=128, recovery_tokens=16)
    for k, v in kw.items():
        setattr(meta, k, v)
    return meta


def test_registry_builds_fresh_policies_by_name() -> None:
    assert set(policy_names()) >= {"lru", "flop", "semantic", "saecache"}
    kinds = {"lru": LRUPolicy, "flop": FlopAwarePolicy, "semantic": SemanticPolicy, "saecache": SAECachePolicy}
    for name, cls in kinds.items():
        a, b = make_policy(name), make_policy(name)
        assert type(a) is cls and a is not b
    mine = SemanticPolicy()
    assert make_policy(mine) is mine
    with pytest.raises(ConfigError, match="unknown policy 'mru'"):
        make_policy("mru")
    with pytest.raises(ConfigError, match="must be an EvictionPolicy or a name"):
        make_policy(3)  # type: ignore[arg-type]


def test_cost_model_is_additive_and_grows_with_position() -> None:
    cost = CostModel()
    assert cost.prefill_seconds(0, 1000) + cost.prefill_seconds(1000, 5000) == pytest.approx(
        cost.prefill_seconds(0, 5000))
    assert cost.prefill_seconds(100_000, 100_016) > cost.prefill_seconds(0, 16)
    assert cost.prefill_seconds(5, 5) == 0.0
    assert cost.fetch_seconds(1000, "disk") == pytest.approx(10 * cost.fetch_seconds(1000, "host"))


def _insert_then_touch(pol: SemanticPolicy | FlopAwarePolicy, pages: list[PageMeta]) -> None:
    """Insert every page, then touch each (one anchor for all: no page entered in between)."""
    for p in pages:
        pol.on_insert(p)
    for p in pages:
        p.last_use = p.uses = 1
        pol.on_access(p, 1)


def test_semantic_order_follows_the_weakest_type() -> None:
    pol = SemanticPolicy()
    _insert_then_touch(pol, [_page(0, types=frozenset({"system"})), _page(1, types=frozenset({"system", "reasoning"})),
                             _page(2, types=frozenset({"user"})), _page(3, depth=2)])
    assert pol.weight(frozenset({"system", "reasoning"})) == 0.0
    assert list(pol.propose("gpu")) == [1, 3, 2, 0]  # reasoning, then the neutral weights (deeper first), system


def test_equal_keys_leave_deepest_first() -> None:
    pol = SemanticPolicy()
    pol.on_insert(_page(9, depth=0, types=frozenset({"user"})))  # never touched again: the oldest anchor
    _insert_then_touch(pol, [_page(d, depth=d, types=frozenset({"user"})) for d in range(4)])
    assert list(pol.propose("gpu")) == [9, 3, 2, 1, 0]


def test_flop_policy_keeps_what_saves_most_compute_per_byte() -> None:
    pol = FlopAwarePolicy(token_scale=4096)  # positions deep enough for attention to matter
    shallow, deep, fat = _page(0, depth=0), _page(1, depth=40), _page(2, depth=40, bytes=1 << 20)
    _insert_then_touch(pol, [shallow, deep, fat])
    assert pol.efficiency(deep) > pol.efficiency(shallow) > pol.efficiency(fat)
    assert list(pol.propose("gpu")) == [2, 0, 1]


def test_online_lognormal_fit() -> None:
    rng = random.Random(1)
    fit = OnlineLogNormal(0.0, 1.0, weight=5000)
    for _ in range(4000):
        fit.observe(rng.lognormvariate(5.0, 0.7))
    assert fit.mu == pytest.approx(5.0, abs=0.05) and fit.sigma == pytest.approx(0.7, abs=0.05)
    assert fit.cdf(math.exp(fit.mu)) == pytest.approx(0.5)
    assert fit.within(0.0, 300.0) == pytest.approx(fit.cdf(300.0))
    assert fit.within(1e9, 10.0) == 0.0
    assert 0.0 < fit.within(200.0, 100.0) < 1.0


def test_reuse_model_learns_return_rates() -> None:
    rng = random.Random(2)
    model = ReuseModel()
    rates = {"system": 0.8, "tool": 0.1}
    for _ in range(3000):
        kind = rng.choice(sorted(rates))
        model.learn(Outcome("q", kind, rng.randrange(8), 1.0, rng.random() < rates[kind]))
    p_sys = model.probability("q", "system", 3)
    p_tool = model.probability("q", "tool", 3)
    assert p_sys == pytest.approx(0.8, abs=0.2) and p_tool == pytest.approx(0.1, abs=0.1)
    assert model.binding(frozenset({"system", "tool"})) == "tool"


def test_saecache_routes_multi_turn_and_single_turn_tasks() -> None:
    chat, single = SAECachePolicy(), SAECachePolicy()
    simulate(chat, multi_turn_chat(0, 30, mean_turns=3.0), capacity=60)
    simulate(single, templated(0, 60), capacity=60)
    assert chat.stats()["session_kind[chat]"] == 1.0
    assert single.stats()["session_kind[template]"] == 0.0
    assert chat.stats()["outcomes"] > 0 and "omega[system]" in chat.stats()


def test_saecache_learns_that_masked_tool_outputs_are_not_reused() -> None:
    work = agentic(0, 30, mean_steps=10.0, keep_observations=1)  # a tool output is masked two steps later
    pol = SAECachePolicy()
    lru = simulate(LRUPolicy(), work, capacity=400)
    res = simulate(pol, work, capacity=400)
    tool, system = pol.model.omega("tool"), pol.model.omega("system")
    assert tool < pol.model.omega0 and tool < 0.2 * system
    assert res.hit_tokens >= lru.hit_tokens


def test_saecache_counts_a_return_only_when_the_page_is_used_again() -> None:
    """An eviction is regretted when the evicted page is looked up or written anew while its ghost
    lives; the very update that evicts it (it leaves the pool) or a later move is no return."""
    pol = SAECachePolicy()
    metas = [_page(i, types=frozenset({"user"}), session="s", task="chat", writer=f"w{i}", hash=1000 + i,
                   pooled=True) for i in range(3)]
    for meta in metas:
        pol.on_insert(meta)
    victim = metas[next(pol.propose("pool"))]
    victim.pooled = False
    pol.on_update(victim)  # evicted from the pool: a ghost, no outcome yet
    assert (pol.model.outcomes, pol.model.returns, len(pol.ghosts["pool"])) == (0, 0, 1)
    old, victim.tier = victim.tier, "host"
    pol.on_move(victim, old)  # moved on: still no use
    assert pol.model.outcomes == 0
    victim.last_use = 5
    pol.on_access(victim, 5)  # looked up again: a regretted eviction
    assert (pol.model.outcomes, pol.model.returns, len(pol.ghosts["pool"])) == (1, 1, 0)
    again = metas[next(pol.propose("pool"))]
    again.pooled = False
    pol.on_update(again)
    pol.on_remove(again)  # forgotten; the same prefix written anew under a fresh id, then sealed
    fresh = _page(7, types=frozenset({"user"}), session="s", task="chat", writer="w9")
    pol.on_insert(fresh)
    fresh.hash = again.hash
    pol.on_update(fresh)
    assert (pol.model.outcomes, pol.model.returns) == (2, 2)
