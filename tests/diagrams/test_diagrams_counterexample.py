"""A counterexample diagram highlights exactly what the trace did."""

from __future__ import annotations

from pathlib import Path

import pytest
from diagram_dot import edges, nodes
from diagram_sim import run

from morphcache.diagrams import TraceStep, counterexample_dot, write_counterexample
from morphcache.diagrams import output as output_mod
from morphcache.spec.model import Spec

CALLS = [("register", {"r": 0}), ("open", {"r": 0, "p": 0}), ("append", {"r": 0, "p": 0}),
         ("seal", {"r": 0, "p": 0}), ("begin_compress", {"p": 0}), ("finish_compress", {"p": 0}),
         ("release_tail", {"p": 0}), ("offload", {"p": 0}), ("offload_done", {"p": 0}), ("drop", {"p": 0}),
         ("recompute", {"p": 0}), ("register", {"r": 1}), ("capture", {"r": 1})]


@pytest.fixture(scope="module")
def trace(spec: Spec) -> list[TraceStep]:
    return run(spec, CALLS)


def _hot(dot: str) -> dict[tuple[str, str], str]:
    return {(e.tail, e.head): e.label for e in edges(dot) if e.attrs.get("color") == "red"}


def test_traversed_edges_are_highlighted_and_numbered(spec: Spec, trace: list[TraceStep]) -> None:
    dot = counterexample_dot(spec, "tail_boundary_aligned", trace)
    hot = _hot(dot)
    assert hot[("seq.idle", "seq.active")].endswith("steps 1 (r=0), 12 (r=1)")  # both readers registered
    assert hot[("tail.empty", "tail.filling")].endswith("step 2 (p=0)")
    assert hot[("tail.filling", "tail.filling")].endswith("step 3 (p=0)")
    assert hot[("tail.sealed", "tail.released")].endswith("step 7 (p=0)")
    assert hot[("tier.host", "tier.dropped")].startswith("drop(p) [")
    assert hot[("tier.dropped", "tier.gpu")].endswith("step 11 (p=0)")
    assert hot[("graph.idle", "graph.captured")].endswith("step 13 (r=1)")
    # foreign writes: tier.recompute reset the tail and the compressed entry, tail.open opened the
    # window and put the page in reader 0's block table
    assert hot[("tail/any", "tail.sealed")] == "tier.recompute\nstep 11 (p=0)"
    assert hot[("compressed/any", "compressed.none")] == "tier.recompute\nstep 11 (p=0)"
    assert hot[("window/any", "window.live")] == "tail.open\nstep 2 (p=0)"
    assert hot[("block/any", "block.in")] == "tail.open\nstep 2 (r=0, p=0)"
    assert len(hot) == 16  # seq 1, block 1, tail 4 + 1, compressed 2 + 1, window 1, tier 4, graph 1
    others = [e for e in edges(dot) if (e.tail, e.head) not in hot and "/start" not in e.tail]
    assert others and all(e.attrs["color"] == "gray55" for e in others)
    # only touched objects get a cluster; untouched states are grey, final states are listed
    assert 'subgraph "cluster_pool"' not in dot and 'subgraph "cluster_tier"' in dot
    assert nodes(dot)["tier.disk"]["color"] == "gray55"
    assert nodes(dot)["tail.sealed"]["label"] == "sealed\n(end: p0)"
    assert nodes(dot)["block.in"]["label"] == "in\n(end: r0,p0)"
    assert nodes(dot)["graph.captured"]["label"] == "captured\n(end: r1)"


def test_table_lists_property_and_steps(spec: Spec, trace: list[TraceStep]) -> None:
    table = nodes(counterexample_dot(spec, "tail_boundary_aligned", trace))["steps"]["label"]
    assert "refuted: tail_boundary_aligned" in table
    assert "recompute(p=0)" in table and "tail[0]: released -&gt; sealed" in table
    assert "open(r=0, p=0)" in table and "block[r0,0]: out -&gt; in" in table
    assert "frontier[r0]: 0 -&gt; 1" in table
    assert "r1,p2: " in table  # the starting state, grouped by reader and page
    assert table.count("<TR>") == 3 + 1 + len(trace)  # title, expr, description; header; steps


def test_unmatched_moves_are_still_drawn(spec: Spec) -> None:
    steps = [TraceStep(None, {}, {"tail[0]": "empty"}),
             TraceStep("seal", {"r": 0, "p": 0}, {"tail[0]": "sealed"}),
             TraceStep("nosuch", {}, {"tail[0]": "released"})]
    dot = counterexample_dot(spec, "not_a_property", steps)
    extra = [e for e in edges(dot) if e.attrs.get("style") == "dotted"]
    assert [(e.tail, e.head, e.label) for e in extra] == [
        ("tail.empty", "tail.sealed", "1 (p=0) seal"), ("tail.sealed", "tail.released", "2 (p=0) ?")]
    assert "refuted: not_a_property" in nodes(dot)["steps"]["label"]


def test_write_counterexample_files(
    spec: Spec, trace: list[TraceStep], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(output_mod, "find_dot", lambda: None)
    paths = write_counterexample(spec, "tail_boundary_aligned", trace, tmp_path)
    assert paths == [tmp_path / "hybrid-cex-tail_boundary_aligned.dot"]
    assert paths[0].read_text(encoding="utf-8") == counterexample_dot(spec, "tail_boundary_aligned", trace)
    assert "dot' not found" in capsys.readouterr().err
