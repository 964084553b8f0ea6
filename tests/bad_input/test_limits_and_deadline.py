"""The input limits (stated, checked, raisable) and the check's overall deadline (term building and solving)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from morphcache.cli import main
from morphcache.errors import InputError
from morphcache.limits import CEILINGS, LimitError, Limits
from morphcache.proofs.check import PROVED, UNKNOWN, Checker, CheckOptions
from morphcache.proofs.deadline import Deadline, DeadlineExpired
from morphcache.proofs.induction import SolverLimits
from morphcache.spec.errors import SpecError
from morphcache.spec.loader import load_spec
from morphcache.spec.yamlpos import load_yaml

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "spec" / "hybrid.yaml"
TINY = ROOT / "spec" / "examples" / "tiny_lease.yaml"
BASE = Path(__file__).parent / "corpus" / "specs" / "parents" / "base.yaml"


class Clock:
    """A clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.ticks = itertools.count()
        self.step = step

    def __call__(self) -> float:
        return next(self.ticks) * self.step


@pytest.mark.parametrize("settings", [{"pages": 0}, {"yaml_values": True}, {"expr_depth": CEILINGS["expr_depth"] + 1},
                                      {"nonsense": 3}])
def test_a_limit_must_be_a_positive_integer_a_known_name_and_below_its_ceiling(settings: dict[str, int]) -> None:
    with pytest.raises(LimitError) as err:
        Limits().replace(settings)
    assert isinstance(err.value, InputError) and next(iter(settings)) in str(err.value)


def test_raising_a_limit_admits_what_the_default_refuses(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(BASE.read_text(encoding="utf-8").replace("pages: 2", "pages: 33"), encoding="utf-8")
    with pytest.raises(SpecError, match=r"33 pages, above the limit pages=32 \(raise it with --input-limit pages=N\)"):
        load_spec(path)
    assert load_spec(path, limits=Limits(pages=33)).pages == 33
    with pytest.raises(SpecError, match="above the limit pages=32"):
        load_spec(SHIPPED, pages=1000)  # an override is bounded like the file's own value


def test_the_depth_ceilings_are_safe(tmp_path: Path) -> None:
    """At the ceilings nothing recurses past Python's stack: load, type-check, encode and prove."""
    deep = "not " * (CEILINGS["expr_depth"] - 10) + "(pin[0] >= 0)"
    path = tmp_path / "deep.yaml"
    path.write_text(BASE.read_text(encoding="utf-8").replace("all(pin[q] <= MAX for q in pages)", f'"{deep}"'),
                    encoding="utf-8")
    with pytest.raises(SpecError, match="expr_depth"):
        load_spec(path)
    limits = Limits(expr_depth=CEILINGS["expr_depth"])
    report = Checker(load_spec(path, limits=limits)).run()
    assert [r.status for r in report.results] == [PROVED]
    half = "not " * (CEILINGS["expr_depth"] // 2)  # a deep predicate called at depth: inlined, or refused first
    for calls, ok in ((CEILINGS["expr_depth"] // 2 - 10, True), (CEILINGS["expr_depth"] - 10, False)):
        text = BASE.read_text(encoding="utf-8").replace("lemmas:", f'predicates:\n  deep: "{half}(pin[p] >= 0)"\n'
                                                         "lemmas:")
        path.write_text(text.replace("all(pin[q] <= MAX for q in pages)", '"' + "not " * calls + '(deep(0))"'),
                        encoding="utf-8")
        if ok:
            assert Checker(load_spec(path, limits=limits)).run().exit_code == 0
        else:
            with pytest.raises(SpecError, match="with 'deep' inlined"):
                load_spec(path, limits=limits)
    nested = "a: " + "[" * (CEILINGS["yaml_depth"] - 1) + "]" * (CEILINGS["yaml_depth"] - 1)
    assert "a" in load_yaml(nested, "nested.yaml", Limits(yaml_depth=CEILINGS["yaml_depth"]))


def test_deadline_ticks_report_progress_and_expire() -> None:
    said: list[str] = []
    now = [0.0]
    deadline = Deadline(10, said.append, heartbeat_s=3, clock=lambda: now[0])
    for now[0] in range(1, 8):
        deadline.tick()
    assert said == ["still building terms: 3 s elapsed, 7 s left", "still building terms: 6 s elapsed, 4 s left"]
    assert deadline.timeout_ms(60_000) == 3_000 and deadline.timeout_ms(500) == 500
    assert Deadline(None).timeout_ms(60_000) == 60_000
    now[0] = 10
    with pytest.raises(DeadlineExpired, match="overall deadline of 10 s passed while solving"):
        deadline.tick("solving")


def test_a_check_past_its_deadline_is_unknown_never_proved() -> None:
    limits = SolverLimits(deadline=Deadline(0.0))
    report = Checker(load_spec(TINY), CheckOptions(limits=limits)).run()
    assert report.exit_code == 2
    assert {r.status for r in report.results} == {UNKNOWN}
    assert all("overall deadline" in r.detail for r in report.results)


def test_the_deadline_bounds_term_building_of_a_large_instance() -> None:
    """1000 pages take hours to encode; the deadline is consulted while terms are built, so the
    check stops after a few hundred terms (the clock here moves one second per reading)."""
    spec = load_spec(SHIPPED, pages=1000, limits=Limits(pages=1000))
    deadline = Deadline(300, clock=Clock(1.0))
    report = Checker(spec, CheckOptions(limits=SolverLimits(deadline=deadline))).run()
    assert report.exit_code == 2 and not [r for r in report.results if r.status != UNKNOWN]
    assert "while building terms" in report.results[0].detail


def test_verbose_check_prints_progress(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(TINY), "-v", "--deadline", "0"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err and all(line.startswith("  .. ") for line in err)
    assert any("tiny_lease: 2 pages" in line for line in err)
