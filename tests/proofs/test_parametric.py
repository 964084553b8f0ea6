"""The parametric method proves for every instance size, and refuses what holds only for some sizes."""

from __future__ import annotations

import textwrap
from pathlib import Path

from morphcache.cli import main
from morphcache.proofs.check import PROVED, Checker, CheckOptions
from morphcache.proofs.parametric import Parametric
from morphcache.spec.loader import load_spec

SPEC = """
spec: counters
instance: {pages: 2, readers: 2, constants: {CAP: 3}}
page:
  x: {type: int, min: 0, init: 0}
  pin: {type: int, min: 0, init: 0}
reader_page:
  held: {type: bool, init: false}
objects:
  slot:
    states: [free, used]
    initial: free
    events:
      take: {from: free, to: used, guard: "x[p] < pages", effects: {"x[p]": "x[p] + 1"}}
      give: {from: used, to: free, guard: "all(not held[s, p] for s in readers)"}
      hold: {from: used, to: used, guard: "not held[r, p]", effects: {"held[r, p]": "true", "pin[p]": "pin[p] + 1"}}
      drop: {from: used, to: used, guard: "held[r, p]", effects: {"held[r, p]": "false", "pin[p]": "pin[p] - 1"}}
properties:
  held_slots_are_used:
    expr: all(all(implies(held[s, q], slot[q] == 'used') for s in readers) for q in pages)
  x_at_most_two:
    expr: all(x[q] <= 2 for q in pages)
  x_within_cap:
    expr: all(x[q] <= pages for q in pages)
  pins_count_holders:
    expr: all(pin[q] == sum(1 if held[s, q] else 0 for s in readers) for q in pages)
  slots_in_use:
    expr: sum(1 if slot[q] == 'used' else 0 for q in pages) <= pages
"""


def test_parametric_proves_size_independent_properties_only(tmp_path: Path) -> None:
    path = tmp_path / "counters.yaml"
    path.write_text(textwrap.dedent(SPEC).lstrip())
    spec = load_spec(path)
    instance = {r.name: r.status for r in Checker(spec).run().results}
    assert all(status == PROVED for status in instance.values())  # in the 2-page instance all hold
    result = Parametric(spec).houdini(spec.properties)
    # a sum over readers is carried as a derived per-page count, updated by hold and drop
    assert set(result.proved) == {"held_slots_are_used", "x_within_cap", "pins_count_holders"}
    assert "x_at_most_two" in result.dropped  # with 3 or more pages, x reaches 3
    assert "slots_in_use" in result.dropped  # true, but not inductive on its own
    assert not result.skipped


def test_cli_reports_the_parametric_method_apart(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "counters.yaml"
    path.write_text(textwrap.dedent(SPEC).lstrip())
    assert main(["check", str(path), "--parametric"]) == 0  # the instance is proved; the method is evidence apart
    out = capsys.readouterr().out
    assert "for every instance size (pages P >= 1, readers R >= 1, the spec's constants), parametric induction:" in out
    assert "UNKNOWN  x_at_most_two" in out and "PROVED   x_within_cap" in out
    report = Checker(load_spec(path), CheckOptions(parametric_constants=True, parametric=True)).run()
    assert report.parametric is not None and report.parametric.symbolic_constants
