"""All the diagrams of a spec: one lifecycle per object and the overview."""

from __future__ import annotations

from pathlib import Path

from morphcache.spec.model import Spec

from .lifecycle import lifecycle_dot
from .output import write_diagrams
from .overview import overview_dot


def diagram_sources(spec: Spec) -> dict[str, str]:
    """File stem -> DOT text: ``<spec>-<object>`` for each object (spec order), then ``<spec>-overview``."""
    sources = {f"{spec.name}-{obj}": lifecycle_dot(spec, obj) for obj in spec.objects}
    sources[f"{spec.name}-overview"] = overview_dot(spec)
    return sources


def write_all(spec: Spec, out_dir: str | Path, svg: bool = True) -> list[Path]:
    """Write ``<spec>-<object>.dot/.svg`` per object and ``<spec>-overview.dot/.svg`` into ``out_dir``.

    The SVGs are skipped (with a note on stderr) when Graphviz ``dot`` is missing.  Returns the
    written paths.
    """
    return write_diagrams(diagram_sources(spec), out_dir, svg=svg)
