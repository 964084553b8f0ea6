"""The shipped design: every obligation PROVED by an unbounded method."""

from __future__ import annotations

from pathlib import Path

from morphcache.proofs.check import PROVED, Checker, Report
from morphcache.spec.loader import load_spec
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


def test_linear_attention_extension_is_proved() -> None:
    """spec/gdn_hybrid.yaml: recurrent-state checkpoints, exact and approximate recovery."""
    report = Checker(load_spec(Path(__file__).resolve().parents[2] / "spec" / "gdn_hybrid.yaml")).run()
    statuses = {r.name: r.status for r in report.results}
    assert report.exit_code == 0, [n for n, s in statuses.items() if s != PROVED]
    assert {"exact_hits_are_exact", "approx_only_opted_in", "ckpt: paths exhaustive",
            "ckpt: in_place / recompute disjoint"} <= set(statuses)
