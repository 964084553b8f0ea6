"""Tail-Replay on the GDN hybrid: opt-in per request, reported approximate with its divergence, its
pages kept out of the cache; and the one place that chooses a request's state path."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from eng_helpers import TOL, C, make_engine

from morphcache.engine import (
    ExactRecompute,
    NoCheckpoints,
    TailReplay,
    TrustSlot,
    ZeroState,
    choose_path,
)
from morphcache.engine.mixers import RecurrentSlot
from morphcache.engine.session import Session
from morphcache.model import HybridModel
from morphcache.proofs import conformance


def _tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(256) for _ in range(n)]


def test_a_tail_replay_request_is_approximate_and_measured(gdn_model: HybridModel) -> None:
    engine = make_engine(gdn_model, None, ops="reference")
    base = _tokens(1, 5 * C)
    engine.serve(base)  # cached: 5 sealed pages, a checkpoint after each
    hit = 5 * C - 4  # in the middle of block 4: the nearest checkpoint (4C) is 12 tokens back
    prompt = base[:hit] + _tokens(2, C + 3)
    budget = round(0.1 * (len(prompt) - 1))  # 9 tokens, fixed at opt-in
    before = engine.manager.metrics().state
    approx = engine.serve(prompt, decode=2, tail_replay=0.1)
    rep = approx.report
    assert approx.start == hit and not rep.exact and rep.state_path == "tail-replay"
    assert rep.replay_budget == 0.1 and rep.linear_tokens == budget and rep.checkpoint_tokens == 0
    d = engine.divergence(approx)
    assert d.positions == C + 5 and d.max_abs_diff > TOL and 0.0 <= d.top1_agreement <= 1.0
    assert rep.withdrawn_pages == 2  # blocks 4 and 5, the pages it sealed on an approximate state
    engine.check_integrity()
    after = engine.manager.metrics().state
    assert before is not None and after is not None
    assert (after.exact_tokens, after.saves) == (before.exact_tokens, before.saves)  # never counted exact
    # the runtime fired the replay: one opt-in, one replay_tail of the budget, the hit counted approximate
    assert (after.opt_ins - before.opt_ins, after.replays - before.replays) == (1, 1)
    assert after.replayed_tokens - before.replayed_tokens == budget
    assert after.approximate_tokens - before.approximate_tokens == hit
    # an exact request for the same prompt reuses only what exact requests cached, and matches golden
    exact = engine.serve(prompt + [9])
    assert exact.start == hit and exact.report.exact and exact.report.state_path == "recompute"
    assert exact.report.checkpoint_tokens == 4 * C and exact.report.linear_tokens == hit - 4 * C
    assert engine.golden_diff(exact) <= TOL
    engine.close()


def test_a_budget_covering_the_hit_is_served_exactly(gdn_model: HybridModel) -> None:
    engine = make_engine(gdn_model, None, ops="reference")
    base = _tokens(3, 2 * C + 4)
    engine.serve(base)
    full = engine.serve(base + [1, 2], tail_replay=1.0)  # a budget over the whole hit: exact costs no more
    assert full.report.exact and full.report.state_path == "restore" and full.report.replay_budget == 1.0
    assert engine.golden_diff(full) <= TOL and full.report.withdrawn_pages == 0
    miss = engine.serve(_tokens(4, C + 2), tail_replay=0.05)  # a miss has nothing to replay: exact
    assert miss.report.exact and miss.report.state_path == "none" and engine.golden_diff(miss) <= TOL
    engine.check_integrity()
    engine.close()


def test_a_zero_budget_starts_from_the_zero_state_at_the_boundary(gdn_model: HybridModel) -> None:
    engine = make_engine(gdn_model, None, ops="triton")
    base = _tokens(5, C + 2)
    first = engine.serve(base)
    engine.manager.drop_state(first.pages[0])  # no checkpoint at C: the exact hit stops short of it (C - 1)
    approx = engine.serve(base + [7], tail_replay=0.0)
    assert approx.start == C - 1 and not approx.report.exact and approx.report.linear_tokens == 0
    assert engine.golden_diff(approx) > TOL  # a zero state at the hit boundary drifts
    engine.check_integrity()
    engine.close()


def test_a_bad_budget_is_refused(gdn_model: HybridModel) -> None:
    with pytest.raises(ValueError, match="fraction"):
        TailReplay(1.5, NoCheckpoints())
    with pytest.raises(ValueError, match="fraction"):
        TailReplay(float("nan"), NoCheckpoints())


class _CheckpointAt:
    """A checkpoint source that reports one at a fixed position (the decision only reads the position)."""

    def __init__(self, position: int) -> None:
        self.position = position

    def nearest(self, session: Session, position: int) -> ZeroState:
        return ZeroState(min(self.position, position))

    def tail(self, session: Session, hit: int, budget: int) -> ZeroState | None:
        return ZeroState(hit - budget) if budget < hit - min(self.position, hit) else None

    def pieces(self, start: int, n: int) -> list[int]:
        return [n]

    def reached(self, session: Session, recurrent: RecurrentSlot) -> None:
        return None


def test_the_state_path_decision() -> None:
    none = NoCheckpoints()
    assert isinstance(choose_path(unsafe=False, tail_replay=None, checkpoints=none), ExactRecompute)
    assert isinstance(choose_path(unsafe=False, tail_replay=0.05, checkpoints=none), TailReplay)
    assert isinstance(choose_path(unsafe=True, tail_replay=None, checkpoints=none), TrustSlot)
    session: Session = SimpleNamespace(prompt_tokens=201)  # type: ignore[assignment]  # budget: 10 tokens
    plan = TailReplay(0.05, none).plan(session, 200)
    assert (plan.path, plan.exact, plan.replayed) == ("tail-replay", False, 10)
    near = TailReplay(0.05, _CheckpointAt(192)).plan(session, 200)  # recompute from 192 costs 8 <= 10
    assert (near.path, near.exact, near.replayed, near.budget) == ("recompute", True, 8, 0.05)
    far = TailReplay(0.05, _CheckpointAt(160)).plan(session, 200)
    assert (far.path, far.exact, far.replayed) == ("tail-replay", False, 10)
    exact = ExactRecompute(none).plan(session, 200)
    assert (exact.path, exact.exact, exact.replayed) == ("recompute", True, 200)
    assert TrustSlot().plan(session, 200).start is None


def test_an_engine_replay_is_the_runtime_s_and_conforms(gdn_model: HybridModel) -> None:
    """An engine run with and without opt-in on the same hit: the runtime fires ``opt_in`` (with the
    request's budget) and ``replay_tail`` only for the request that opted in; every recorded step
    conforms to gdn_hybrid.yaml at the runtime's constants."""
    engine = make_engine(gdn_model, None, ops="reference", record=True)
    m = engine.manager
    base = _tokens(6, 3 * C)
    engine.serve(base)
    m.drop_state(engine.serve(base[:C + 1]).pages[0])  # no checkpoint before the hit: replay beats recompute
    prompt = base[:2 * C - 2] + _tokens(7, 5)
    opted = engine.serve(prompt + [3], tail_replay=0.2)  # its pages are withdrawn: the same hit again below
    plain = engine.serve(prompt)
    assert plain.report.exact and plain.report.state_path == "recompute" and engine.golden_diff(plain) <= TOL
    assert opted.start == plain.start == 2 * C - 2
    assert not opted.report.exact and opted.report.state_path == "tail-replay"
    assert opted.report.linear_tokens == round(0.2 * len(prompt))
    steps = m.steps()
    fired = [(s.event, s.args.get("n")) for s in steps if s.event in ("opt_in", "replay_tail")]
    assert fired == [("opt_in", round(0.2 * len(prompt))), ("replay_tail", None)]
    bad = [f"{s.event}{s.args}: {why}" for s in steps
           if (why := conformance.check_step(m.spec, m.constants, s.before, s.event, s.args, s.after)) is not None]
    assert bad == []
    engine.check_integrity()
    engine.close()
