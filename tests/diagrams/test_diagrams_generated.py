"""The committed diagrams are exactly what the generator writes for the shipped spec."""

from __future__ import annotations

from pathlib import Path

from diagram_sim import COMMITTED, SHIPPED

from morphcache.diagrams import diagram_sources, write_all
from morphcache.diagrams.labels import event_label
from morphcache.spec.expr import render
from morphcache.spec.loader import load_spec
from morphcache.spec.model import Spec

REGENERATE = "python -m morphcache.diagrams spec/hybrid.yaml diagrams"


def test_committed_dot_is_regenerated_byte_for_byte(spec: Spec, tmp_path: Path) -> None:
    written = write_all(spec, tmp_path, svg=False)
    assert [p.suffix for p in written] == [".dot"] * len(written)
    fresh = {p.name: p.read_text(encoding="utf-8") for p in written}
    committed = {p.name: p.read_text(encoding="utf-8") for p in COMMITTED.glob(f"{spec.name}-*.dot")}
    assert sorted(committed) == sorted(fresh), f"diagram files differ; run: {REGENERATE}"
    for name, text in fresh.items():
        assert committed[name] == text, f"{name} is stale; run: {REGENERATE}"


def test_every_object_and_the_overview_have_a_diagram(spec: Spec) -> None:
    stems = list(diagram_sources(spec))
    assert stems == [f"{spec.name}-{obj}" for obj in spec.objects] + [f"{spec.name}-overview"]


def test_output_is_deterministic(spec: Spec) -> None:
    again = load_spec(SHIPPED)
    assert diagram_sources(spec) == diagram_sources(again)
    for text in diagram_sources(spec).values():
        assert text.endswith("}\n")


def test_changed_guard_changes_the_label(spec: Spec, tmp_path: Path) -> None:
    event = spec.event("slide")
    lines = SHIPPED.read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(i for i in range(event.loc.line, len(lines)) if lines[i].strip().startswith("guard:"))
    old_line = lines[at].rstrip("\n")
    lines[at] = f"{old_line} and frontier[r] >= 1\n"
    copy = tmp_path / "edited.yaml"
    copy.write_text("".join(lines), encoding="utf-8")

    edited = load_spec(copy)
    new_guard = render(edited.event("slide").guard)
    assert new_guard == f"{render(event.guard)} and frontier[r] >= 1"
    before = diagram_sources(spec)[f"{spec.name}-window"]
    after = diagram_sources(edited)[f"{edited.name}-window"]
    assert after != before
    assert "frontier[r] >= 1" in event_label(edited.event("slide")).replace("\n", " ")
    assert "frontier[r] >= 1" in after and "frontier[r] >= 1" not in before
