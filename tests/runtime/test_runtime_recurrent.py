"""The recurrent state of linear-attention layers as runtime objects (spec/gdn_hybrid.yaml): checkpoints
saved at page ends, restored on an exact hit at a checkpointed boundary, recomputed from the nearest
one, replayed approximately only for requests that opted in.  Every recorded step conforms to the
GDN spec, ``check_integrity`` holds after every operation, and an approximate state is never
reported or counted as exact."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from rt_helpers import toks
from test_runtime_conformance import INSTANCE, check_all

from morphcache.runtime import (
    GDN_SPEC,
    BadInputError,
    CacheManager,
    ConfigError,
    GuardRefused,
    MorphcacheError,
    NeedsRecovery,
    Ready,
    StatePath,
)

Make = Callable[..., CacheManager]


class Checked:
    """A manager whose every call is followed by ``check_integrity``."""

    def __init__(self, m: CacheManager) -> None:
        self.m = m

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.m, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                self.m.check_integrity()

        return call


def attach(m: Any, sid: str, tokens: list[int], *, approximate: bool = False, budget: int | None = None) -> Ready:
    """Register ``sid`` (``budget``: its replay budget), look ``tokens`` up for it and attach the hit;
    returns the lookup's answer."""
    m.register(sid, approximate=approximate, replay_budget=budget)
    r = m.lookup(tokens, owner=sid)
    assert isinstance(r, Ready), r
    m.attach(sid, r.lease)
    m.release(r.lease)
    return r


def write_with_checkpoints(m: Any, sid: str, tokens: list[int], c: int) -> None:
    """Register ``sid`` and write ``tokens`` a page at a time, saving the state at every page end."""
    m.register(sid)
    for start in range(0, len(tokens), c):
        m.append(sid, tokens[start:start + c])
        if m.frontier(sid) % c == 0:
            m.save_state(sid, ("state", sid, m.frontier(sid)))


def test_the_shipped_spec_has_no_recurrent_part(make_manager: Make) -> None:
    m = make_manager()
    m.register("a", toks(0, 9))
    r = m.lookup(toks(0, 9))
    assert isinstance(r, Ready) and r.state is None and m.metrics().state is None
    for call in (lambda: m.rebuild_state("a"), lambda: m.save_state("a", 0), lambda: m.register("b", approximate=True)):
        with pytest.raises(ConfigError, match="no recurrent state"):
            call()
    m.check_integrity()


def test_restore_recompute_and_replay_conform(make_manager: Make) -> None:
    """At the checked instance's constants (C=2, R=2): every kind of recurrent event, each recorded
    step checked against gdn_hybrid.yaml, integrity after every operation."""
    raw = make_manager(GDN_SPEC, record=True, **INSTANCE)
    m = Checked(raw)
    write_with_checkpoints(m, "a", toks(0, 5), 2)  # checkpoints after pages 0 and 1
    pages = raw.sequence_pages("a")
    r = attach(m, "b", toks(0, 4) + [99])
    assert r.state == StatePath("restore", True, 4, 4, pages[1], 1)
    assert m.rebuild_state("b").payload == ("state", "a", 4)
    m.save_state("b", "b at 4")  # an exact state may be saved again
    r = attach(m, "c", toks(0, 5), approximate=True)  # 5 - 4 = 1 token to recompute: exact wins
    assert r.state is not None and r.state.kind == "recompute" and r.state.exact
    m.drop_state(pages[1])
    m.drop_state(pages[0])
    r = attach(m, "d", toks(0, 5), approximate=True)  # no checkpoint: recompute 5 > R = 2 tokens
    assert r.state == StatePath("replay_tail", False, 5, 3)
    rebuilt = m.rebuild_state("d")
    assert rebuilt.path == r.state and rebuilt.payload is None
    m.append("d", [42])
    with pytest.raises(GuardRefused, match="save"):
        m.save_state("d", "approximate")  # never checkpoint an approximate state
    m.free("d")
    write_with_checkpoints(m, "e", toks(50, 4), 2)
    e_pages = raw.sequence_pages("e")
    m.offload_state(e_pages[1])
    res = m.lookup(toks(50, 4) + [7])
    assert isinstance(res, NeedsRecovery) and [a.path for a in res.plan.state_assignments] == ["prefetch"]
    assert res.plan.assignments == ()  # nothing for the page-level recovery to do
    assert m.recover(res.plan).done == {"prefetch_ckpt": 1}
    for sid in ("a", "b", "c", "e"):
        m.free(sid)
    m.offload(e_pages[1], "host")  # the page moves: its generation moves, the checkpoint is stale
    res = m.lookup(toks(50, 4))
    if isinstance(res, NeedsRecovery):
        m.recover(res.plan)
    r = attach(m, "f", toks(50, 4))
    assert r.state is not None and r.state.kind == "recompute" and r.state.page == e_pages[0]
    m.rebuild_state("f")
    m.free("f")
    steps = raw.steps()
    events = {s.event for s in steps}
    assert {"save", "restore", "recompute_state", "replay_tail", "opt_in", "offload_ckpt", "prefetch_ckpt",
            "land_ckpt", "drop_ckpt", "attach", "offload_done"} <= events, events
    assert check_all(raw, steps) == []


def test_approximate_is_never_exact_and_needs_opt_in(make_manager: Make) -> None:
    """Random readers (some opted in) attach random hits of checkpointed prefixes and rebuild their
    state while pages move and checkpoints drop: a tail replay only for an opted-in reader, never
    reported exact, counted apart; every recorded step conforms."""
    raw = make_manager(GDN_SPEC, record=True, window=64, constants={"R": 1})
    m = Checked(raw)
    rng = random.Random(5)
    heads = [toks(0, 24), toks(0, 8) + toks(90, 16)]
    for k, head in enumerate(heads):
        write_with_checkpoints(m, f"w{k}", head, 4)
    exact = approx = 0
    for i in range(30):
        sid, opted = f"s{i}", rng.random() < 0.5
        head = rng.choice(heads)
        try:
            if rng.random() < 0.3:
                pid = rng.choice(raw.page_ids())
                rng.choice([m.drop_state, m.offload_state, m.prefetch_state, lambda p: m.offload(p, "host")])(pid)
            m.register(sid, approximate=opted)
            r = m.lookup(head[: rng.randrange(3, 25)], owner=sid)
            if isinstance(r, NeedsRecovery):
                assert r.plan.state is not None and (opted or r.plan.state.kind != "replay_tail")
                m.recover(r.plan)
                r = m.lookup(head[: r.plan.target], owner=sid)
            if not isinstance(r, Ready):
                m.free(sid)
                continue
            assert r.state is not None and (opted or r.state.kind != "replay_tail")
            try:
                m.attach(sid, r.lease)
            finally:
                m.release(r.lease)
        except MorphcacheError:
            if sid in raw.sequences():
                m.free(sid)
            continue
        rebuilt = m.rebuild_state(sid).path
        assert rebuilt.exact == (rebuilt.kind != "replay_tail")
        assert opted or rebuilt.kind != "replay_tail"
        store, rid = raw.parts.pipe.store, raw.parts.readers.sequence(sid).rid
        assert bool(store.reader("reported_exact", rid)) == rebuilt.exact
        exact += rebuilt.position if rebuilt.exact else 0
        approx += 0 if rebuilt.exact else rebuilt.position
        m.free(sid)
    snap = raw.metrics().state
    assert snap is not None and snap.replays > 0 and snap.restores > 0 and snap.recomputes > 0
    assert (snap.exact_tokens, snap.approximate_tokens) == (exact, approx)
    assert snap.exact_effective_hit_rate == exact / snap.requested_tokens
    recurrent = {"save", "restore", "recompute_state", "replay_tail", "opt_in", "offload_ckpt", "prefetch_ckpt",
                 "land_ckpt", "drop_ckpt", "attach"}
    steps = [s for s in raw.steps() if s.event in recurrent]  # the others are checked in test_runtime_conformance
    assert check_all(raw, steps) == []


def test_bad_calls_have_one_road_out(make_manager: Make) -> None:
    m = make_manager(GDN_SPEC)
    m.register("a", toks(0, 6))
    with pytest.raises(BadInputError, match="page end"):
        m.save_state("a", 0)
    with pytest.raises(BadInputError, match="approximate must be a bool"):
        m.register("b", approximate="yes")
    with pytest.raises(BadInputError, match=r"replay budget is an int in \[0, 2\]"):
        m.register("b", approximate=True, replay_budget=3)  # more than the spec's R
    with pytest.raises(BadInputError, match="only with approximate=True"):
        m.register("b", replay_budget=1)
    with pytest.raises(GuardRefused, match="offload_ckpt"):
        m.offload_state(m.sequence_pages("a")[0])  # nothing saved
    m.check_integrity()


def test_only_an_opted_in_reader_gets_a_tail_replay(make_manager: Make) -> None:
    """The same hit, no checkpoint: recompute from the start for a reader that did not opt in, a tail
    replay (approximate) for one that did, and the exact path again when it asks for it."""
    m = Checked(make_manager(GDN_SPEC, window=64, constants={"R": 2}))
    m.register("w", toks(0, 11))  # no checkpoint saved
    plain = attach(m, "plain", toks(0, 11))
    opted = attach(m, "opted", toks(0, 11), approximate=True)
    assert plain.state == StatePath("recompute", True, 11, 0)
    assert opted.state == StatePath("replay_tail", False, 11, 9)
    assert m.state_path("opted", exact=True) == plain.state
    assert m.rebuild_state("plain").path == plain.state
    assert m.rebuild_state("opted").path == opted.state
    assert m.rebuild_state("opted", exact=True).path == plain.state  # recompute_state: exact again
    snap = m.metrics().state
    assert (snap.exact_tokens, snap.approximate_tokens, snap.replayed_tokens) == (22, 11, 2)


def test_each_reader_replays_its_own_budget(make_manager: Make) -> None:
    """Two readers opted in with budgets 1 and 5 over the same hit replay 1 and 5 tokens (the spec's
    ``replayed[r]``); a budget at least the exact recompute's tokens gets the exact path; every step
    conforms to the spec."""
    m = Checked(make_manager(GDN_SPEC, window=64, constants={"R": 16}, record=True))
    m.register("w", toks(0, 11))
    small = attach(m, "small", toks(0, 11), approximate=True, budget=1)
    large = attach(m, "large", toks(0, 11), approximate=True, budget=5)
    whole = attach(m, "whole", toks(0, 11), approximate=True, budget=11)
    assert small.state == StatePath("replay_tail", False, 11, 10)
    assert large.state == StatePath("replay_tail", False, 11, 6)
    assert whole.state == StatePath("recompute", True, 11, 0)
    assert [m.rebuild_state(sid).path.tokens for sid in ("small", "large", "whole")] == [1, 5, 11]
    snap = m.metrics().state
    assert (snap.opt_ins, snap.replays, snap.replayed_tokens, snap.approximate_tokens) == (3, 2, 6, 22)
    assert check_all(m.m, m.m.steps()) == []
