"""Well-definedness: a ``//`` or ``%`` whose divisor can be zero where it is evaluated is never PROVED.

Z3's division is total, so without these obligations ``1 // 0 == 0`` style facts could be proved.  A
possibly-zero divisor in a guard, an effect or a property is REFUTED with a trace to a state where it
is zero; a constant zero divisor is a located spec error (exit 2).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from morphcache.cli import main
from morphcache.proofs.check import PROVED, REFUTED, Checker
from morphcache.spec.loader import load_spec

BASE = """
spec: division
instance: {pages: 1, constants: {N: 3}}
page:
  x: {type: int, min: 0, max: N, init: 0}
  y: {type: int, min: 0, max: 9, init: 0}
objects:
  box:
    states: [open, closed]
    initial: open
    events:
      bump: {from: open, to: open, guard: "x[p] < N", effects: {"x[p]": "x[p] + 1"}}
      drain: {from: open, to: open, guard: "x[p] > 0", effects: {"x[p]": "x[p] - 1"}}
      %s
properties:
  y_small: {expr: "%s"}
"""


def _spec(tmp_path: Path, event: str, extra: str = "", prop: str = "all(y[q] <= 9 for q in pages)") -> Path:
    path = tmp_path / "division.yaml"
    path.write_text(textwrap.dedent(BASE % (event, prop)).lstrip() + extra)
    return path


def _result(path: Path, name: str):  # type: ignore[no-untyped-def]
    report = Checker(load_spec(path)).run()
    return report, next(r for r in report.results if r.name == name)


def test_guard_dividing_by_a_variable_that_can_be_zero_is_refuted(tmp_path: Path) -> None:
    path = _spec(tmp_path, 'split: {from: open, to: closed, guard: "6 // x[p] >= 2"}')
    report, result = _result(path, "defined: guard of split")
    assert result.status == REFUTED and result.trace is not None
    assert result.trace.length == 0, "x is 0 in the initial state, where the guard is evaluated"
    assert "x[p] != 0" in " ".join(result.trace.failed)
    assert report.exit_code == 1


def test_guard_that_short_circuits_the_division_is_proved(tmp_path: Path) -> None:
    path = _spec(tmp_path, 'split: {from: open, to: closed, guard: "x[p] > 0 and 6 // x[p] >= 2"}')
    report, result = _result(path, "defined: guard of split")
    assert result.status == PROVED
    assert report.exit_code == 0


def test_effect_dividing_by_zero_where_the_event_fires_is_refuted_with_a_trace(tmp_path: Path) -> None:
    # The divisor x - 1 is zero once x has been bumped once: the trace has to get there.
    path = _spec(tmp_path, 'split: {from: open, to: open, guard: "y[p] == 0", effects: {"y[p]": "9 % (x[p] - 1)"}}')
    report, result = _result(path, "defined: effects of split")
    assert result.status == REFUTED and result.trace is not None
    assert [st.event for st in result.trace.steps[1:]] == ["bump"]
    assert report.exit_code == 1


def test_property_dividing_by_zero_is_refuted(tmp_path: Path) -> None:
    path = _spec(tmp_path, "", prop="all(y[q] // (N - x[q]) <= 9 for q in pages)")
    _, result = _result(path, "defined: y_small")
    assert result.status == REFUTED and result.trace is not None
    assert [st.event for st in result.trace.steps[1:]] == ["bump"] * 3


def test_constant_zero_divisor_is_a_located_spec_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _spec(tmp_path, 'split: {from: open, to: closed, guard: "x[p] // (N - 3) >= 0"}')
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"{path}:13:56: "), err[0]  # at the divisor
    assert "division by zero" in err[0] and "'N - 3'" in err[0]


def test_division_follows_python_for_negative_operands(tmp_path: Path) -> None:
    # Python rounds toward minus infinity: 7 // -2 == -4 and 7 % -2 == -1, where SMT-LIB's div and mod
    # give -3 and 1; -7 // 2 == -4 and -7 % 2 == 1 agree in both.
    extra = ('lemmas:\n'
             '  floor: {expr: "all(implies(x[q] == 0, (x[q] - 7) // 2 == -4) for q in pages)"}\n'
             '  negative_divisor: {expr: "7 // -2 == -4 and 7 % -2 == -1 and -7 % 2 == 1"}\n')
    report = Checker(load_spec(_spec(tmp_path, "", extra))).run()
    statuses = {r.name: r.status for r in report.results}
    assert statuses["floor"] == PROVED and statuses["negative_divisor"] == PROVED
