"""Every known-bad design is refuted, with a shortest trace that the spec's own relation replays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from morphcache.cli import main
from morphcache.proofs.bmc import shortest_counterexamples
from morphcache.proofs.check import REFUTED, Checker
from morphcache.proofs.conformance import check_step
from morphcache.proofs.induction import SolverLimits
from morphcache.proofs.system import TransitionSystem
from morphcache.spec.loader import load_spec

ROOT = Path(__file__).resolve().parents[2]
DESIGNS = sorted((ROOT / "spec" / "designs").glob("*.yaml"))


def test_catalogue_has_at_least_ten_designs() -> None:
    assert len(DESIGNS) >= 10


@pytest.mark.parametrize("path", DESIGNS, ids=lambda p: p.stem)
def test_design_is_refuted(path: Path) -> None:
    spec = load_spec(path)
    assert spec.refutes, f"{path.name} must say which property it breaks"
    report = Checker(spec).run()
    assert report.exit_code == 1
    refuted = {r.name: r for r in report.results if r.status == REFUTED}
    for name in spec.refutes:
        assert name in refuted, f"{path.name}: expected '{name}' refuted, got {sorted(refuted)}"
        result = refuted[name]
        if result.trace is None:
            continue
        trace = result.trace
        assert trace.failed, "the trace names the conjunct that fails"
        # Each step of the trace is a step the spec's transition relation allows.
        for before, after in zip(trace.steps, trace.steps[1:], strict=False):
            assert after.event is not None
            reason = check_step(spec, spec.constants, before.state, after.event, after.args, after.state)
            assert reason is None, f"step {after.index}: {reason}"
        # Shortest: no shorter trace violates the property.
        if trace.length > 0:
            prop = next(p for p in spec.properties if p.name == name)
            shorter = shortest_counterexamples(TransitionSystem(spec), [prop], trace.length - 1, SolverLimits())
            assert name not in shorter


def test_cli_prints_step_table_and_writes_itf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    design = next(p for p in DESIGNS if p.stem == "window_unchecked")
    out = tmp_path / "trace.itf.json"
    code = main(["check", str(design), "--trace-out", str(out)])
    text = capsys.readouterr().out
    assert code == 1
    assert "counterexample to window_covers_frontier" in text
    assert "slide(p=0)" in text and "window[0]: live -> expired" in text
    itf = json.loads(out.read_text())
    assert itf["#meta"]["format"] == "ITF"
    assert itf["states"][-1]["window"]["#map"][0][1] == "expired"
    assert itf["states"][-1]["action"] == "slide"
    assert itf["states"][0]["frontier"] == {"#bigint": "0"}
