"""``diagram_main``: the entry point of ``morphcache diagram SPEC --out DIR``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from diagram_sim import SHIPPED

from morphcache.diagrams import diagram_main, lifecycle_dot
from morphcache.diagrams import output as output_mod
from morphcache.diagrams.output import write_diagrams
from morphcache.spec.model import Spec


def test_bad_spec_gives_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: x\nobjects: [1, 2]\n", encoding="utf-8")
    assert diagram_main(str(bad), str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{bad}:")
    assert diagram_main(str(tmp_path / "missing.yaml"), str(tmp_path / "out")) == 2
    assert "cannot read spec" in capsys.readouterr().err


def test_writes_dot_only_without_graphviz(
    spec: Spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(output_mod, "find_dot", lambda: None)
    assert diagram_main(str(SHIPPED), str(tmp_path)) == 0
    out = capsys.readouterr()
    printed = out.out.split()
    assert printed == [str(tmp_path / f"{spec.name}-{obj}.dot") for obj in spec.objects] + [
        str(tmp_path / f"{spec.name}-overview.dot")]
    assert "'dot' not found" in out.err
    assert not list(tmp_path.glob("*.svg"))


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz 'dot' is not installed")
def test_svg_is_rendered_with_dot(spec: Spec, tmp_path: Path) -> None:
    paths = write_diagrams({"one": lifecycle_dot(spec, "window")}, tmp_path)
    assert paths == [tmp_path / "one.dot", tmp_path / "one.svg"]
    svg = paths[1].read_text(encoding="utf-8")
    assert "<svg" in svg and "slide" in svg


def test_a_failed_render_is_reported_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("dot") is None:
        pytest.skip("graphviz 'dot' is not installed")
    paths = write_diagrams({"broken": "digraph { a -> }\n"}, tmp_path)
    assert paths == [tmp_path / "broken.dot"]
    assert "could not render" in capsys.readouterr().err
