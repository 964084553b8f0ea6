"""The entry point behind ``morphcache diagram SPEC --out DIR``."""

from __future__ import annotations

import sys

from morphcache.spec.errors import SpecError
from morphcache.spec.loader import load_spec

from .generate import write_all


def diagram_main(spec_path: str, out_dir: str) -> int:
    """Load ``spec_path``, write all its diagrams into ``out_dir`` and print their paths.

    Returns 0 on success, 2 when the spec does not load (its one-line error goes to stderr) and 1
    when the output directory cannot be written.
    """
    try:
        spec = load_spec(spec_path)
    except SpecError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    try:
        paths = write_all(spec, out_dir)
    except OSError as exc:
        print(f"morphcache: cannot write diagrams to {out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m morphcache.diagrams SPEC OUT_DIR``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m morphcache.diagrams SPEC OUT_DIR", file=sys.stderr)
        return 2
    return diagram_main(args[0], args[1])
