"""Readers and ghosts in the spec language: scopes, subscripts, quantifiers, the no-ghost-read rule,
environment events, and what the checker, traces and conformance make of them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from morphcache.cli import main
from morphcache.proofs.check import PROVED, REFUTED, Checker
from morphcache.proofs.conformance import check_step
from morphcache.proofs.system import TransitionSystem
from morphcache.proofs.trace import format_table
from morphcache.spec.errors import SpecError
from morphcache.spec.loader import load_spec
from morphcache.spec.model import READER, READER_PAGE

EXAMPLE = Path(__file__).resolve().parents[2] / "spec" / "examples" / "two_readers.yaml"


def _write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def _variant(tmp_path: Path, body: str) -> Path:
    return _write(tmp_path, "variant.yaml", f"extends: {EXAMPLE}\nspec: variant\n{textwrap.dedent(body)}")


def test_example_loads_with_reader_scopes() -> None:
    spec = load_spec(EXAMPLE)
    assert spec.readers == 2 and spec.pages == 2
    assert spec.objects["lease"].scope == READER_PAGE
    assert spec.ghosts == {"data", "promised"}
    assert spec.event("acquire").args == ("r", "p")
    assert spec.event("evict").args == ("p",)  # reads lease[s, p] for every reader s: no acting reader
    ts = TransitionSystem(spec)
    assert sum(1 for a in ts.actions if a.event.name == "acquire") == 4  # 2 readers x 2 pages
    assert "promised[r1,0]" in {name for name, _, _ in ts.slots}


def test_example_is_proved() -> None:
    report = Checker(load_spec(EXAMPLE)).run()
    assert [r.status for r in report.results] == [PROVED, PROVED]


def test_one_readers_check_is_refuted_with_both_readers_in_the_trace(tmp_path: Path) -> None:
    bad = _variant(tmp_path, """
        objects:
          residency:
            events:
              evict: {guard: "lease[r, p] == 'free'"}
        """)
    report = Checker(load_spec(bad)).run()
    result = next(r for r in report.results if r.name == "read_sees_promised")
    assert result.status == REFUTED and result.trace is not None
    assert result.trace.length == 2
    readers = {st.args["r"] for st in result.trace.steps[1:]}
    assert readers == {0, 1}, "a shared-page bug needs one reader to act on what the other holds"
    table = format_table(result.trace)
    assert "acquire(r=" in table and "evict(r=" in table and "violated: read(r=" in table


def test_guard_reading_a_ghost_is_a_located_spec_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _variant(tmp_path, """
        objects:
          lease:
            events:
              acquire: {guard: "residency[p] == 'resident' and data[p] >= 0"}
        """)
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{bad}:7:56: event 'acquire': its guard reads ghost 'data'"), err


def test_effect_on_design_state_reading_a_ghost_needs_observes(tmp_path: Path) -> None:
    body = """
        page:
          seen: {type: int, min: 0, init: 0}
        objects:
          residency:
            events:
              reload: {effects: {"data[p]": "data[p] + 1", "seen[p]": "data[p]"}%s}
        """
    with pytest.raises(SpecError, match="its effect on 'seen' reads ghost 'data'"):
        load_spec(_variant(tmp_path, body % ""))
    spec = load_spec(_variant(tmp_path, body % ", observes: [data]"))
    assert spec.event("reload").observes == ("data",)


def test_environment_events_may_read_ghosts_and_are_checked(tmp_path: Path) -> None:
    bad = _variant(tmp_path, """
        objects:
          residency:
            events:
              bitflip:
                from: resident
                to: resident
                env: true
                guard: data[p] < 3
                effects: {"data[p]": "data[p] + 1"}
        """)
    spec = load_spec(bad)
    assert spec.event("bitflip").env
    report = Checker(spec).run()
    result = next(r for r in report.results if r.name == "read_sees_promised")
    assert result.status == REFUTED and result.trace is not None
    assert "bitflip" in [st.event for st in result.trace.steps]


@pytest.mark.parametrize(("expr", "message"), [
    ("lease[p] == 'free'", "'lease' is per reader and page: write lease[r, p]"),
    ("lease[p, r] == 'free'", "subscript of 'lease' must be a reader"),
    ("r + 1 > 0", "expected int, got reader"),
    ("all(lease[q, p] == 'free' for q in pages)", "subscript of 'lease' must be a reader"),
    ("any(s < r for s in readers)", "ordering comparison needs ints, got reader"),
])
def test_subscripts_are_typed(tmp_path: Path, expr: str, message: str) -> None:
    bad = _variant(tmp_path, f"""
        objects:
          lease:
            events:
              read: {{guard: "{expr}"}}
        """)
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_spec(bad)


def test_wildcard_effects_over_readers_and_pages(tmp_path: Path) -> None:
    spec_path = _write(tmp_path, "wild.yaml", """
        spec: wild
        instance: {pages: 2, readers: 2}
        reader:
          seen: {type: int, min: 0, init: 0}
        reader_page:
          mark: {type: int, min: 0, init: 0}
        objects:
          batch:
            scope: reader
            states: [idle, captured]
            initial: idle
            events:
              capture:
                from: idle
                to: captured
                effects: {"mark[r, *]": "q + 1", "seen[r]": "sum(1 for q in pages)"}
              reset:
                from: captured
                to: idle
                effects: {"mark[*, *]": "mark[s, q] if s != r else 0", "seen[*]": "seen[s] if s != r else 0"}
        properties:
          marks_follow_capture:
            expr: >-
              all(all(implies(batch[s] == 'captured', mark[s, q] == q + 1 and seen[s] == pages)
                      for q in pages) for s in readers)
        """)
    spec = load_spec(spec_path)
    assert spec.scope_of("seen") == READER
    assert [e.index for e in spec.event("capture").effects] == ["r,*", "r"]
    assert [e.index for e in spec.event("reset").effects] == ["*,*", "*"]
    assert spec.event("reset").args == ("r",)  # a per-reader object: its events act for a reader
    assert all(r.status == PROVED for r in Checker(spec).run().results)


def test_itf_trace_has_reader_maps(tmp_path: Path) -> None:
    bad = _variant(tmp_path, """
        objects:
          residency:
            events:
              evict: {guard: "lease[r, p] == 'free'"}
        """)
    out = tmp_path / "trace.itf.json"
    assert main(["check", str(bad), "--trace-out", str(out)]) == 1
    files = sorted(tmp_path.glob("trace*.json"))
    data = json.loads(files[0].read_text())
    last = data["states"][-1]
    assert {"#tup": [{"#bigint": "0"}, {"#bigint": "0"}]} in [k for k, _ in last["lease"]["#map"]]
    assert last["action_args"]["#map"][0][0] == "r"


def test_conformance_leaves_unrecorded_ghosts_free() -> None:
    spec = load_spec(EXAMPLE)
    before = {"residency[0]": "resident", "residency[1]": "resident",
              "lease[r0,0]": "free", "lease[r0,1]": "free", "lease[r1,0]": "free", "lease[r1,1]": "free"}
    after = dict(before, **{"lease[r1,0]": "held"})
    assert check_step(spec, {}, before, "acquire", {"r": 1, "p": 0}, after) is None
    wrong = dict(before, **{"lease[r0,0]": "held"})
    assert check_step(spec, {}, before, "acquire", {"r": 1, "p": 0}, wrong) is not None
    evicted = dict(before, **{"residency[0]": "evicted"})
    assert check_step(spec, {}, evicted, "acquire", {"r": 0, "p": 0}, dict(evicted, **{"lease[r0,0]": "held"}))
