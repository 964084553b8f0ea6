"""The shipped design: every obligation PROVED by an unbounded method."""

from __future__ import annotations

from morphcache.proofs.check import PROVED, Report
from morphcache.spec.model import RULES


def test_every_obligation_proved(shipped_report: Report) -> None:
    not_proved = [(r.name, r.status, r.detail) for r in shipped_report.results if r.status != PROVED]
    assert not_proved == []
    assert shipped_report.exit_code == 0


def test_proofs_are_unbounded(shipped_report: Report) -> None:
    for r in shipped_report.results:
        assert not r.method.startswith("bmc"), f"{r.name} was only searched, not proved"


def test_all_four_rules_are_covered(shipped_report: Report) -> None:
    rules = {r.rule for r in shipped_report.results}
    assert set(RULES) <= rules


def test_every_kind_of_obligation_present(shipped_report: Report) -> None:
    kinds = {r.kind for r in shipped_report.results}
    assert {"lemma", "invariant", "step", "partition", "layout"} <= kinds
