"""Compilation: runtime domains and batch plans, the transition table against the transitions machines,
guards from the file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from rt_helpers import small_config, spec_variant, toks

from morphcache.runtime import (
    SHIPPED_SPEC,
    CacheManager,
    ConfigError,
    DomainError,
    GuardRefused,
    PinnedPageError,
    Ready,
    Step,
)
from morphcache.runtime.batchplan import AFFINE, ONCE, PRE, BatchPlanner
from morphcache.runtime.bounds import declared_bounds
from morphcache.runtime.compiler import CompiledSpec
from morphcache.runtime.machines import MachineBackend, TableBackend
from morphcache.spec.interp import evaluate
from morphcache.spec.loader import load_spec


def test_domains_and_batch_plans_of_the_shipped_spec() -> None:
    """Quantifiers range over the readers or pages an entry ties to the event's page or reader; batches
    of acquire/read/release are decided column-wise, attach with its frontier stepped and its
    next_block_free conjunct proved preserved (Z3), so evaluated once."""
    spec = load_spec(SHIPPED_SPEC)
    cs = CompiledSpec(spec, small_config().spec_constants(spec.constants))
    kinds = {name: {(d.kind, d.key, d.vars) for d in cs.domains_read(ev)} for name, ev in cs.events.items()}
    assert kinds["forget"] == kinds["slide"] == kinds["prefetch"] == {("page_readers", "p", ("block",))}
    assert kinds["open"] == kinds["attach"] == kinds["register"] == {("reader_pages", "r", ("block",))}
    assert any(n.startswith("@agg") for n in cs.events["admit"].reads)
    assert cs.reverse_indexed == {"block"}
    planner = BatchPlanner(cs)
    for name in ("acquire", "read", "release", "release_last", "detach"):
        plan = planner.plan(cs.events[name], 0, [1, 2])
        assert plan is not None and plan.independent, name
    attach = planner.plan(cs.events["attach"], 0, [1, 2])
    assert attach is not None and attach.affine == {"frontier": 4}
    assert attach.conjuncts.count(ONCE) == 1 and attach.conjuncts.count(AFFINE) == 1 and PRE in attach.conjuncts
    many = planner.plan(cs.events["append"], [0, 1], [2, 3])
    assert many is not None and many.independent
    assert planner.plan(cs.events["open"], [0, 1], [2, 3]) is None  # reads block rows other firings write
    assert planner.plan(cs.events["capture"], 0, [1]) is None  # a reader's own event


def test_runtime_constants_replace_the_checked_instance() -> None:
    spec = load_spec(SHIPPED_SPEC)
    consts = small_config(pool_capacity=5).spec_constants(spec.constants)
    assert (consts["C"], consts["W"], consts["CAPACITY"], consts["MAX_PIN"]) == (4, 6, 5, 4)
    bounds = declared_bounds(spec)
    hi = bounds["frontier"].hi
    assert hi is not None and evaluate(hi, {**consts, "pages": 10}) == 40  # pages * C, not the instance's 6
    fill_hi = bounds["fill"].hi
    assert fill_hi is not None and evaluate(fill_hi, consts) == 4


def test_table_equals_machines_exhaustively() -> None:
    """For every object, event, source state and guard outcome, the fast table decides exactly as the
    transitions machine (target state, and whether the guard was consulted)."""
    spec = load_spec(SHIPPED_SPEC)
    cs = CompiledSpec(spec, small_config().spec_constants(spec.constants))
    machine, table = MachineBackend(cs), TableBackend(cs)
    cases = 0
    for owner, obj in spec.objects.items():
        for ev in obj.events:
            for state in obj.states:
                for outcome in (True, False):
                    asked: dict[str, int] = {"machine": 0, "table": 0}

                    def check(which: str, outcome: bool = outcome, asked: dict[str, int] = asked) -> bool:
                        asked[which] += 1
                        return outcome

                    got_m = machine.decide(owner, ev.name, state, lambda: check("machine"))
                    got_t = table.decide(owner, ev.name, state, lambda: check("table"))
                    assert got_m == got_t, (owner, ev.name, state, outcome)
                    assert asked["machine"] == asked["table"], (owner, ev.name, state)
                    expect = ev.target if (state in ev.sources and outcome) else None
                    assert got_t == expect
                    cases += 1
    assert cases > 100


def _scenario(m: CacheManager) -> None:
    m.register("a", toks(0, 13))
    r = m.lookup(toks(0, 13))
    assert isinstance(r, Ready)
    m.read(r.lease)
    m.release(r.lease)
    pid = m.sequence_pages("a")[0]
    m.offload(pid, "disk")
    m.prefetch(pid).result()
    m.capture(["a"])
    m.append("a", [7, 7])
    m.uncapture(["a"])
    m.free("a")


def test_machine_backend_runs_the_same_steps(make_manager: Callable[..., CacheManager]) -> None:
    fast = make_manager(record=True)
    slow = make_manager(record=True, backend="machine")
    _scenario(fast)
    _scenario(slow)
    a, b = fast.steps(), slow.steps()
    assert len(a) >= 40
    def key(steps: list[Step]) -> list[tuple[object, ...]]:
        return [(s.event, s.args, s.before, s.after) for s in steps]

    assert key(a) == key(b)
    fast.check_integrity()
    slow.check_integrity()


def test_changing_a_guard_in_the_spec_file_changes_the_runtime(
        tmp_path: Path, make_manager: Callable[..., CacheManager]) -> None:
    """Same code, two spec files: only the offload guard differs (the pin check is removed)."""
    weak = spec_variant(tmp_path, {"objects.tier.events.offload.guard":
                                   "tail[p] in {'sealed', 'released'} and compressed[p] != 'building'"})
    for spec, refused in ((None, True), (weak, False)):
        m = make_manager(spec)
        m.register("a", toks(0, 8))
        r = m.lookup(toks(0, 8))
        assert isinstance(r, Ready)
        pid = r.lease.pages[0]
        if refused:
            with pytest.raises(PinnedPageError) as exc:
                m.offload(pid)
            assert "pin[p] == 0" in str(exc.value) and exc.value.event == "offload"
        else:
            m.offload(pid)
            assert m.page_state(pid)["tier"] == "host"


def test_effect_outside_declared_bounds_is_refused(tmp_path: Path,
                                                   make_manager: Callable[..., CacheManager]) -> None:
    effects = {"fill[p]": "C + 1", "frontier[r]": "frontier[r] + 1"}
    bad = spec_variant(tmp_path, {"objects.tail.events.seal.effects": effects})
    m = make_manager(bad)
    m.register("a", toks(0, 3))
    with pytest.raises(DomainError) as exc:
        m.append("a", [3])
    assert "fill" in str(exc.value)
    assert m.frontier("a") == 3
    m.check_integrity()


def test_spec_without_a_driven_event_is_refused(tmp_path: Path) -> None:
    bad = spec_variant(tmp_path, {"objects.tier.events.spill": None})
    with pytest.raises(ConfigError, match="event 'spill'"):
        CacheManager(bad, small_config())


def test_refusal_names_event_page_and_failed_conjunct(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager()
    m.register("a", toks(0, 6))
    pid = m.sequence_pages("a")[1]  # still filling
    with pytest.raises(GuardRefused) as exc:
        m.offload(pid)
    err = exc.value
    assert (err.event, err.page, err.block) == ("offload", pid, 1)
    assert err.failed == "tail[p] in {'sealed', 'released'}"
    assert "tail[p]='filling'" in str(err)


@pytest.mark.parametrize("k", [2, 3])
def test_repeats_are_decided_at_their_ends(make_manager: Callable[..., CacheManager], k: int) -> None:
    """The appends that fill a page are decided by the guard at the first and the last firing (each
    affine conjunct is a comparison of expressions linear in the firing's number): the same outcome,
    refusal and state as firing them one by one with the closures."""
    spec = load_spec(SHIPPED_SPEC)
    cs = CompiledSpec(spec, small_config().spec_constants(spec.constants))
    plan = BatchPlanner(cs).plan(cs.events["append"], 0, 1, repeat=True)
    assert plan is not None and plan.ends and plan.affine == {"fill": 1, "frontier": 1}
    outcomes = []
    for fast in (True, False):
        m = make_manager(fast=fast)
        m.register("a", toks(0, 1))  # C = 4: fill 1, so 2 more appends fit before the seal
        rec = m.parts.readers.sequence("a")
        pipe = m.parts.pipe
        before = (dict(pipe.fired), pipe.store.page("fill", rec.block[-1]), pipe.store.reader("frontier", rec.rid))
        try:
            pipe.fire_repeat("append", rec.rid, rec.block[-1], k)
            outcomes.append(("ok", pipe.store.page("fill", rec.block[-1]), pipe.store.reader("frontier", rec.rid)))
        except GuardRefused as exc:
            assert (dict(pipe.fired), pipe.store.page("fill", rec.block[-1]),
                    pipe.store.reader("frontier", rec.rid)) == before
            outcomes.append(("refused", type(exc).__name__, str(exc)))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == ("ok" if k == 2 else "refused")
