"""The entry point behind ``morphcache diagram SPEC --out DIR``."""

from __future__ import annotations

import sys
from pathlib import Path

from morphcache.errors import UsageError
from morphcache.limits import Limits
from morphcache.spec.loader import load_spec

from .generate import write_all


def write_spec_diagrams(spec_path: str, out_dir: str, limits: Limits | None = None) -> list[Path]:
    """Load ``spec_path`` and write all its diagrams into ``out_dir``; return the written paths.

    A spec that does not load raises its :class:`~morphcache.spec.errors.SpecError`; an output
    directory that cannot be written raises a :class:`~morphcache.errors.UsageError` about ``--out``.
    """
    spec = load_spec(spec_path, limits=limits)
    try:
        return write_all(spec, out_dir)
    except OSError as exc:
        raise UsageError("morphcache diagram", "--out", f"cannot write diagrams to {out_dir}: "
                         f"{exc.strerror or exc}") from None


def diagram_main(spec_path: str, out_dir: str) -> int:
    """``morphcache diagram SPEC --out DIR --no-counterexamples``: write the diagrams, print their
    paths and return 0; on bad input return 2 after the command line printed its one-line error."""
    from morphcache.cli import main

    return main(["diagram", spec_path, "--out", out_dir, "--no-counterexamples"])


def main(argv: list[str] | None = None) -> int:
    """``python -m morphcache.diagrams SPEC OUT_DIR``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m morphcache.diagrams SPEC OUT_DIR", file=sys.stderr)
        return 2
    return diagram_main(args[0], args[1])
