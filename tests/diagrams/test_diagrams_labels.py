"""Lifecycle and overview diagrams carry the spec's own guards, effects and cross-object links."""

from __future__ import annotations

from pathlib import Path

from diagram_dot import edges, guard_part, nodes

from morphcache.diagrams import lifecycle_dot, overview_dot
from morphcache.diagrams.labels import effect_text, event_title, unwrap, wrap_and
from morphcache.spec.expr import render
from morphcache.spec.loader import load_spec
from morphcache.spec.model import Spec

SHIPPED = Path(__file__).resolve().parents[2] / "spec" / "hybrid.yaml"


def test_guard_label_equals_render(spec: Spec) -> None:
    for obj in spec.objects.values():
        dot = lifecycle_dot(spec, obj.name)
        for event in obj.events:
            title = event_title(event) + (" (env)" if event.env else "")
            own = [e for e in edges(dot) if guard_part(e.label).split(" [")[0] == title
                   and "style" not in e.attrs]
            assert [(e.tail, e.head) for e in own] == [
                (f"{obj.name}.{s}", f"{obj.name}.{event.target}") for s in event.sources
            ]
            for edge in own:
                head = guard_part(edge.label)
                guard = render(event.guard)
                assert head == title if guard == "True" else head == f"{title} [{guard}]"
                effects = [line for line in edge.label.split("\n") if line.startswith("/ ")]
                assert effects == [f"/ {effect_text(eff)}" for eff in event.effects]


def test_long_guards_wrap_on_and_only() -> None:
    text = "a == 1 and bb[p] == 'x' and ccc < 3 and dddd in {'e', 'f'} and g"
    lines = wrap_and(text, 20)
    assert len(lines) > 1
    assert all(line.endswith(" and") for line in lines[:-1])
    assert unwrap(lines) == text
    assert wrap_and("short") == ["short"]


def test_initial_state_has_an_entry_arrow(spec: Spec) -> None:
    for obj in spec.objects.values():
        dot = lifecycle_dot(spec, obj.name)
        assert nodes(dot)[f"{obj.name}/start"]["shape"] == "point"
        entry = [e for e in edges(dot) if e.tail == f"{obj.name}/start"]
        assert [e.head for e in entry] == [f"{obj.name}.{obj.initial}"]
        assert set(obj.states) <= {n.split(".", 1)[1] for n in nodes(dot) if "." in n}


def test_foreign_writes_are_dashed_edges_from_any(spec: Spec) -> None:
    tail = edges(lifecycle_dot(spec, "tail"))
    recompute = [e for e in tail if e.label == "tier.recompute"]
    assert [(e.tail, e.head, e.attrs["style"]) for e in recompute] == [("tail/any", "tail.sealed", "dashed")]
    window = edges(lifecycle_dot(spec, "window"))
    foreign = {(e.head, e.label.split(" [")[0]) for e in window if e.tail == "window/any"}
    assert foreign == {("window.live", "tail.open"), ("window.live", "tier.recompute"),
                       ("window.unwritten", "tail.forget")}
    assert not [e for e in edges(lifecycle_dot(spec, "graph")) if e.tail == "graph/any"]
    block = edges(lifecycle_dot(spec, "block"))  # a per-(reader, page) object written by a page event
    foreign_block = [(e.tail, e.head, e.label) for e in block if e.tail == "block/any"]
    assert foreign_block == [("block/any", "block.in", "tail.open")]


def test_titles_name_the_scope_and_events_their_arguments(spec: Spec) -> None:
    assert "lease (per reader and page)" in lifecycle_dot(spec, "lease")
    assert "seq (per reader)" in lifecycle_dot(spec, "seq")
    assert "tier (per page)" in lifecycle_dot(spec, "tier")
    labels = [e.label for e in edges(lifecycle_dot(spec, "tail"))]
    assert any(label.startswith("open(r, p) [") for label in labels)
    assert any(label.startswith("release_tail(p) [") for label in labels)
    tier = [e.label for e in edges(lifecycle_dot(spec, "tier"))]
    assert any(label.startswith("damage_disk(p) (env)") for label in tier)
    assert "seq\\n(per reader)" in overview_dot(spec)


def test_a_conditional_foreign_write_is_one_edge_per_branch(tmp_path: Path) -> None:
    variant = tmp_path / "conditional.yaml"
    variant.write_text(
        f"extends: {SHIPPED}\n"
        "objects:\n  tier:\n    events:\n      recompute:\n        effects:\n"
        "          \"window[p]\": \"'live' if (depth[p] + 1) * C + W > frontier[r] else 'expired'\"\n"
    )
    window = edges(lifecycle_dot(load_spec(variant), "window"))
    foreign = {(e.head, e.label.split(" [")[0]) for e in window if e.tail == "window/any"}
    assert foreign == {("window.live", "tail.open"), ("window.live", "tier.recompute"),
                       ("window.expired", "tier.recompute"), ("window.unwritten", "tail.forget")}
    conditional = [e for e in window if e.tail == "window/any" and e.head == "window.expired"]
    assert conditional[0].label.replace("\n", " ") == "tier.recompute [(depth[p] + 1) * C + W <= frontier[r]]"


def test_overview_has_a_cluster_per_object_and_guard_links(spec: Spec) -> None:
    dot = overview_dot(spec)
    for obj in spec.objects.values():
        assert f'subgraph "cluster_{obj.name}" {{' in dot
        assert all(f"{obj.name}.{s}" in nodes(dot) for s in obj.states)
    links = {(e.tail, e.head): e.label.split("\n") for e in edges(dot) if e.attrs.get("style") == "dashed"}
    assert "begin_compress" in links[("compressed/title", "tail/title")]
    assert "build_index" in links[("indexer/title", "compressed/title")]
    assert "slide" in links[("window/title", "block/title")]  # every reader's block table
    assert "acquire_tail" in links[("lease/title", "block/title")]
    assert "/ open" in links[("tail/title", "block/title")]
    assert "/ recompute" in links[("tier/title", "tail/title")]
    assert all(a.split("/")[0] != b.split("/")[0] for a, b in links)
