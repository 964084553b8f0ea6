"""Graphviz diagrams generated from a parsed spec, never written by hand.

API:

* ``write_all(spec, out_dir, svg=True) -> list[Path]``: ``<spec>-<object>.dot/.svg`` for every
  object lifecycle and ``<spec>-overview.dot/.svg``.
* ``diagram_sources(spec) -> dict[str, str]``: the same DOT texts, by file stem (deterministic).
* ``write_counterexample(spec, property_name, steps, out_dir, svg=True) -> list[Path]``: the
  diagram of a refuted property's trace, ``steps`` being a sequence of :class:`TraceStep`
  (``event: str | None``, ``args: dict[str, int]``, ``state: dict[str, object]``, the full state
  after the step, keyed ``tail[0]``, ``frontier``, ``graph``).  Writes ``<spec>-cex-<property>.dot``
  and its SVG.
* ``write_spec_diagrams(spec_path, out_dir, limits=None) -> list[Path]``: load and write (raises
  :class:`~morphcache.errors.InputError` on bad input);
* ``diagram_main(spec_path, out_dir) -> int``: the same through the command line, printing the
  paths (2 and one line on stderr on bad input).

SVGs are rendered with the Graphviz ``dot`` binary; without it only DOT is written (with a note on
stderr).
"""

from __future__ import annotations

from .counterexample import counterexample_dot, write_counterexample
from .generate import diagram_sources, write_all
from .labels import event_label, guard_text
from .lifecycle import lifecycle_dot
from .main import diagram_main, write_spec_diagrams
from .overview import overview_dot
from .trace import TraceStep

__all__ = [
    "TraceStep",
    "counterexample_dot",
    "diagram_main",
    "diagram_sources",
    "event_label",
    "guard_text",
    "lifecycle_dot",
    "overview_dot",
    "write_all",
    "write_counterexample",
    "write_spec_diagrams",
]
