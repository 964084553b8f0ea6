"""UNKNOWN is never PROVED; a missing spec file gives one error line and exit 2 (the corpus of malformed
inputs is tests/bad_input)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from morphcache.cli import main
from morphcache.proofs.check import PROVED, UNKNOWN, Checker, CheckOptions
from morphcache.proofs.induction import SolverLimits
from morphcache.spec.loader import load_spec

SHIPPED = Path(__file__).resolve().parents[2] / "spec" / "hybrid.yaml"


def test_tiny_resource_limit_is_unknown_not_proved() -> None:
    report = Checker(load_spec(SHIPPED), CheckOptions(limits=SolverLimits(rlimit=1))).run()
    statuses = {r.name: r.status for r in report.results}
    assert UNKNOWN in statuses.values()
    assert report.exit_code == 2
    for r in report.results:
        if r.status == UNKNOWN:
            assert r.detail, "an unknown says why"


def test_cli_unknown_exit_code_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    code = main(["check", str(SHIPPED), "--rlimit", "1", "--json", str(out)])
    assert code == 2
    data = json.loads(out.read_text())
    assert data["exit_code"] == 2
    assert any(r["status"] == UNKNOWN for r in data["results"])
    assert "UNKNOWN" in capsys.readouterr().out


def test_json_report_of_shipped_design(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert main(["check", str(SHIPPED), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["results"] and all(r["status"] == PROVED for r in data["results"])


def test_missing_spec_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read spec" in capsys.readouterr().err
