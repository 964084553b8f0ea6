"""``morphcache simulate --policy``: each shipped policy serves the typed chat under memory pressure with
exact logits (within the golden tolerance), and the report gives its evictions, refused proposals, hit
rates and recomputed tokens; a bad policy name is the one-line error.  The kernels' plain-torch
references keep the runs short."""

from __future__ import annotations

import json

import pytest

from morphcache.cli import main
from morphcache.simulate import simulate_main

SMALL = ["--conversations", "2", "--turns", "2", "--gpu-pages", "12", "--host-pages", "2", "--ops", "reference",
         "--no-progress", "--decode", "1"]


@pytest.mark.parametrize("name", ["lru", "flop", "semantic", "saecache"])
def test_each_policy_serves_exactly_under_pressure(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate_main([*SMALL, "--policy", name, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["policy"] == name and rep["requests"] == rep["sampled"] == 4
    assert rep["within_tolerance"] and rep["max_abs_diff"] <= rep["tolerance"] == 1e-4
    assert rep["integrity_checks"] == 4
    ev = rep["evictions"]
    assert set(ev) == {"gpu", "host", "disk", "pool"} and ev["gpu"] > 0 and ev["host"] > 0
    assert rep["evicted"] == sum(ev.values())
    assert ev["gpu"] <= rep["tier_events"]["offload"] + rep["tier_events"]["drop"]
    assert rep["policy_refusals"] >= 0 and 0 < rep["effective_hit_rate"] <= rep["nominal_hit_rate"]
    assert rep["recomputed_tokens"] >= 0 and isinstance(rep["policy_stats"], dict)
    if name == "saecache":
        assert any(k.startswith("omega[") for k in rep["policy_stats"])  # it saw the chat's token types


def test_policy_figures_in_the_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulate_main([*SMALL, "--policy", "semantic", "--sample-every", "3"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "eviction policy" in x)
    assert "semantic:" in line and "evictions (GPU -> host/drop" in line
    assert "proposals" in out and "refused" in out
    for row in ("nominal hit rate", "effective hit rate", "tokens recomputed", "max |logit - golden|"):
        assert row in out


@pytest.mark.parametrize("argv", [["--policy", "fifo"], ["--policy"], ["--policy", ""]])
def test_bad_policy_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("morphcache simulate: --policy:") and "\n" not in err and "Traceback" not in err
