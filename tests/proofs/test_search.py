"""The checker's searches can fail: weakening k-induction, stopping either search one step early or
breaking the symmetry reduction or the slicing makes one of these tests fail.

Each engine is checked against the other: the explicit-state search against bounded model checking
of the whole system (``proofs/bmc.py``), bounded model checking against the explicit-state search.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from morphcache.cli import main
from morphcache.proofs.bfs import ExplicitSearch
from morphcache.proofs.bmc import shortest_counterexamples
from morphcache.proofs.check import PROVED, REFUTED, UNKNOWN, Checker, CheckOptions
from morphcache.proofs.explicit import ExplicitSystem
from morphcache.proofs.induction import Induction, SolverLimits
from morphcache.proofs.slicing import cone
from morphcache.proofs.symmetry import symmetric_dims
from morphcache.proofs.system import TransitionSystem
from morphcache.spec.loader import load_spec

ROOT = Path(__file__).resolve().parents[2]
DESIGNS = ROOT / "spec" / "designs"
# (design, property, shortest length): lengths confirmed by whole-system BMC in test_catalogue.py.
SHORT = [("window_unchecked", "window_covers_frontier", 4), ("slide_own_frontier", "window_covers_frontier", 4),
         ("recompute_own_graph", "graph_topology_static", 6), ("forget_held_tail", "leases_keep_their_bytes", 5)]


def _result(path: Path, name: str, **options: object):  # type: ignore[no-untyped-def]
    report = Checker(load_spec(path), CheckOptions(**options)).run()  # type: ignore[arg-type]
    return next(r for r in report.results if r.name == name)


def test_k_induction_does_not_prove_a_false_property(capsys: pytest.CaptureFixture[str]) -> None:
    design = DESIGNS / "window_unchecked.yaml"
    assert main(["check", str(design), "--bmc-depth", "1"]) == 2
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if " window_covers_frontier " in x)
    assert line.split()[0] == UNKNOWN, line
    # and directly: the property is false (a 4-step trace), so no k makes it k-inductive
    spec = load_spec(design)
    ts = TransitionSystem(spec)
    induction = Induction(ts, SolverLimits())
    proved = induction.houdini(list(spec.properties))
    prop = next(p for p in spec.properties if p.name == "window_covers_frontier")
    assert prop not in proved
    assert not any(induction.k_induction(prop, proved, k) for k in (2, 3))


@pytest.mark.parametrize(("design", "name", "length"), SHORT, ids=[s[0] for s in SHORT])
def test_explicit_search_finds_exactly_at_the_depth_limit(design: str, name: str, length: int) -> None:
    path = DESIGNS / f"{design}.yaml"
    at = _result(path, name, bmc_depth=length)
    assert at.status == REFUTED and at.trace is not None and at.trace.length == length
    assert at.method.startswith("explicit-state"), at.method
    below = _result(path, name, bmc_depth=length - 1)
    assert below.status == UNKNOWN, (below.status, below.method)


@pytest.mark.parametrize(("design", "name", "length"), SHORT, ids=[s[0] for s in SHORT])
def test_bmc_finds_exactly_at_the_depth_limit(design: str, name: str, length: int) -> None:
    path = DESIGNS / f"{design}.yaml"
    at = _result(path, name, bmc_depth=length, explicit_states=0)  # BMC from depth 1 on
    assert at.status == REFUTED and at.trace is not None and at.trace.length == length
    assert at.method.startswith("bmc"), at.method
    spec = load_spec(path)
    prop = next(p for p in spec.properties if p.name == name)
    explicit = ExplicitSearch(ExplicitSystem(spec)).search([prop], length)  # the other engine, no slice
    assert explicit.traces[name].length == length
    assert name not in ExplicitSearch(ExplicitSystem(spec)).search([prop], length - 1).traces


def test_symmetry_is_detected_only_where_ids_are_interchangeable() -> None:
    assert symmetric_dims(load_spec(ROOT / "spec" / "hybrid.yaml")) == (True, True)
    # the single-reader design computes with page ids (frontier == p * C): pages are not interchangeable
    assert symmetric_dims(load_spec(ROOT / "spec" / "hybrid_single.yaml")) == (False, True)


def test_symmetry_reduction_keeps_shortest_lengths() -> None:
    # at 3 pages and 2 readers (the catalogue checks this design with one page): both kinds of ids interchangeable
    spec = dataclasses.replace(load_spec(DESIGNS / "release_all_pins.yaml"), pages=3, readers=2)
    prop = next(p for p in spec.properties if p.name == "pins_count_leases")
    reduced = ExplicitSystem(spec)
    plain = ExplicitSystem(spec, symmetry=False)  # every state on its own
    a = ExplicitSearch(reduced).search([prop], 9, 10**6)
    b = ExplicitSearch(plain).search([prop], 9, 10**6)
    assert a.traces[prop.name].length == b.traces[prop.name].length == 9
    assert a.states * 4 < b.states


def test_slice_keeps_what_the_property_depends_on() -> None:
    spec = load_spec(ROOT / "spec" / "hybrid.yaml")
    props = {p.name: p for p in spec.properties}
    keep = cone(spec, [props["resident_is_intact"]])
    assert {"tier", "copied", "checked", "verified", "intact", "copy_intact", "tail"} <= keep.names
    assert not {"content", "promised", "mine", "cslot", "cap_pages"} & keep.names
    step = cone(spec, [props["read_returns_promised"]])
    assert "read" in step.events, "a step property is decided at its event, which stays in the slice"
    assert {"content", "promised", "mine", "window_kv", "lgen", "gen"} <= step.names


FINITE = """
spec: finite
instance: {pages: 1}
system:
  x: {type: int, min: 0, max: 3, init: 0}
  y: {type: int, min: 0, max: 3, init: 0}
  z: {type: bool, init: false}
  w: {type: bool, init: false}
objects:
  clock:
    scope: system
    states: [running]
    initial: running
    events:
      tick: {from: running, to: running, guard: "y < %d", effects: {y: "y + 1"}}
      copy: {from: running, to: running, effects: {x: "y"}}
      toggle: {from: running, to: running, effects: {z: "not z"}}
      flip: {from: running, to: running, effects: {w: "not w"}}
properties:
  x_below_three: {expr: "x != 3"}
"""


def test_exhaustive_explicit_search_proves_a_true_non_inductive_property(tmp_path: Path) -> None:
    path = tmp_path / "finite.yaml"
    path.write_text(textwrap.dedent(FINITE % 2).lstrip())
    result = _result(path, "x_below_three")
    assert result.status == PROVED
    assert result.method.startswith("explicit-state (all "), result.method  # not 1-, 2- or 3-inductive
    spec = load_spec(path)
    ts = TransitionSystem(spec)
    prop = spec.properties[0]
    assert Induction(ts, SolverLimits()).houdini([prop]) == []
    assert not shortest_counterexamples(ts, [prop], 8, SolverLimits())
    # one search step short of the whole state space, it proves nothing
    assert _result(path, "x_below_three", bmc_depth=2).status == UNKNOWN
    # and with y allowed to reach 3 the same property is refuted
    path.write_text(textwrap.dedent(FINITE % 3).lstrip())
    refuted = _result(path, "x_below_three")
    assert refuted.status == REFUTED and refuted.trace is not None and refuted.trace.length == 4
