"""Every known-bad design is refuted with a valid, shortest trace, each confirmed by an oracle
independent of the search that found it.

The checker finds counterexamples by explicit-state search (``proofs/explicit.py`` on a cone of
influence, ``proofs/slicing.py``) and, deeper, by BMC.  Here each trace is

* replayed step by step with the Z3 step checker (``proofs/conformance.py``, the proofs' encoding of
  one transition, which the explicit search does not use),
* evaluated at its end with the expression interpreter (``spec/interp.py``): the property fails, and
* confirmed shortest by bounded model checking of the whole, unsliced system to one step less.

The README's catalogue table lists every design with the length of its traces and the readers acting
in them, as found here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from morphcache.cli import main
from morphcache.proofs.bmc import shortest_counterexamples
from morphcache.proofs.check import REFUTED, Checker
from morphcache.proofs.conformance import check_step
from morphcache.proofs.induction import SolverLimits
from morphcache.proofs.system import TransitionSystem
from morphcache.proofs.trace import Trace, scope_of
from morphcache.spec.interp import compile_expr
from morphcache.spec.loader import load_spec
from morphcache.spec.model import SCOPE_ARGS, Property, Spec

ROOT = Path(__file__).resolve().parents[2]
DESIGNS = sorted((ROOT / "spec" / "designs").glob("*.yaml"))

SHARING = {"slide_own_frontier", "release_all_pins", "attach_captured", "recompute_own_graph",
           "prefetch_own_graph", "offload_own_lease", "attach_expired_window"}
"""Wrong only when readers share pages: the trace shows one reader acting on what another holds."""
GHOST_FACT = {"verify_blind", "forget_held_tail"}
"""Wrong only because a flag is trusted without its fact: the trace ends on a ghost the design cannot see."""


def _readme_catalogue() -> dict[str, tuple[set[int], str]]:
    """The README's catalogue table: design -> (the trace lengths in its "steps" cell, its "readers" cell)."""
    rows: dict[str, tuple[set[int], str]] = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`") and cells[0].strip("`") in {p.stem for p in DESIGNS}:
            rows[cells[0].strip("`")] = ({int(x) for x in re.findall(r"\d+", cells[3])}, cells[4])
    return rows


README_ROWS = _readme_catalogue()


def test_catalogue_size() -> None:
    names = {p.stem for p in DESIGNS}
    assert len(DESIGNS) >= 21
    assert SHARING | GHOST_FACT <= names and len(SHARING | GHOST_FACT) >= 8
    assert set(README_ROWS) == names, "the README's catalogue table lists every design once"


def _violated(spec: Spec, prop: Property, state: dict[str, Any]) -> bool:
    """The interpreter's verdict on ``prop`` in ``state`` (a step property: some enabling of its event
    makes the expression false)."""
    names, arrays = scope_of(spec, state, dict(spec.constants))
    if prop.kind != "step":
        return not compile_expr(prop.expr)(names, arrays)
    ev = spec.event(str(prop.event))
    guard, expr = compile_expr(ev.guard), compile_expr(prop.expr)
    for r in (spec.reader_range() if ev.takes_reader else [None]):
        for p in (spec.page_range() if ev.takes_page else [None]):
            env = {**names, **{k: v for k, v in (("r", r), ("p", p)) if v is not None}}
            at = tuple(env[d] for d in SCOPE_ARGS[ev.scope])
            owner = names[ev.owner] if not at else arrays[ev.owner][at if len(at) > 1 else at[0]]
            if owner in ev.sources and guard(env, arrays) and not expr(env, arrays):
                return True
    return False


def _readers_acting(trace: Trace) -> set[int]:
    return {st.args["r"] for st in trace.steps[1:] if "r" in st.args}


@pytest.mark.parametrize("path", DESIGNS, ids=lambda p: p.stem)
def test_design_is_refuted_with_a_shortest_trace(path: Path) -> None:
    spec = load_spec(path)
    assert spec.refutes, f"{path.name} must say which obligations it breaks"
    report = Checker(spec).run()
    assert report.exit_code == 1
    refuted = {r.name: r for r in report.results if r.status == REFUTED}
    for name in spec.refutes:
        assert name in refuted, f"{path.name}: expected '{name}' refuted, got {sorted(refuted)}"
        trace = refuted[name].trace
        if trace is None:  # a diversion or layout witness, not a trace
            continue
        assert trace.failed, "the trace names the conjunct that fails"
        prop = next(p for p in spec.properties if p.name == name)
        for before, after in zip(trace.steps, trace.steps[1:], strict=False):
            assert after.event is not None
            reason = check_step(spec, spec.constants, before.state, after.event, after.args, after.state)
            assert reason is None, f"step {after.index}: {reason}"
        assert _violated(spec, prop, trace.steps[-1].state)
        assert not any(_violated(spec, prop, st.state) for st in trace.steps[:-1])
        if trace.length > 0:
            shorter = shortest_counterexamples(TransitionSystem(spec), [prop], trace.length - 1, SolverLimits())
            assert name not in shorter, f"{path.name}: BMC finds a shorter trace than the checker's"
        if path.stem in SHARING:
            assert _readers_acting(trace) == {0, 1}, "a sharing bug shows both readers acting"
        if path.stem in GHOST_FACT:
            assert any(k.split("[")[0] in spec.ghosts for st in trace.steps for k in st.changed)
            assert any(g in " ".join(trace.failed) for g in spec.ghosts), trace.failed
    traces = [t for t in (refuted[name].trace for name in spec.refutes) if t is not None]
    figures = ({t.length for t in traces}, "".join(sorted({str(len(_readers_acting(t))) for t in traces})))
    assert README_ROWS[path.stem] == figures, "the README's catalogue row gives the checker's figures"


def test_cli_prints_step_table_with_readers_and_writes_itf(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    design = next(p for p in DESIGNS if p.stem == "slide_own_frontier")
    out = tmp_path / "trace.itf.json"
    code = main(["check", str(design), "--trace-out", str(out)])
    text = capsys.readouterr().out
    assert code == 1
    assert "counterexample to window_covers_frontier (rule" not in text  # it has no rule
    assert "counterexample to window_covers_frontier:" in text
    assert "slide(r=1, p=0)" in text and "window[0]: live -> expired" in text
    written = sorted(tmp_path.glob("trace-*.itf.json"))
    itf = json.loads(next(p for p in written if p.name.endswith("window_covers_frontier.itf.json")).read_text())
    assert itf["#meta"]["format"] == "ITF"
    assert itf["states"][-1]["action"] == "slide"
    assert itf["states"][-1]["action_args"] == {"#map": [["r", {"#bigint": "1"}], ["p", {"#bigint": "0"}]]}
    assert itf["states"][-1]["window"]["#map"][0][1] == "expired"
    assert itf["states"][0]["frontier"]["#map"] == [[{"#bigint": str(r)}, {"#bigint": "0"}] for r in (0, 1)]
