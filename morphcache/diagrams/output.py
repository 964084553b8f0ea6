"""Write DOT files and render them to SVG with the Graphviz ``dot`` binary.

When ``dot`` is not installed only the DOT files are written and one warning goes to stderr; a
failed render is reported the same way and never raises.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

DOT_BINARY = "dot"
TIMEOUT_S = 120


def find_dot() -> str | None:
    """The path of the ``dot`` binary, or None when Graphviz is not installed."""
    return shutil.which(DOT_BINARY)


def render_svg(dot_path: Path, dot_binary: str) -> Path | None:
    """Render ``dot_path`` to the ``.svg`` beside it; None (and a note on stderr) if that fails."""
    svg_path = dot_path.with_suffix(".svg")
    try:
        subprocess.run([dot_binary, "-Tsvg", str(dot_path), "-o", str(svg_path)], check=True,
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or str(exc)
        print(f"morphcache: could not render {dot_path}: {detail.strip()}", file=sys.stderr)
        return None
    return svg_path


def write_diagrams(sources: Mapping[str, str], out_dir: str | Path, svg: bool = True) -> list[Path]:
    """Write each ``stem -> DOT text`` as ``out_dir/stem.dot`` and, if asked and possible, its SVG.

    Returns the written paths in order: each DOT file followed by its SVG.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dot_binary = find_dot() if svg else None
    if svg and dot_binary is None:
        print("morphcache: graphviz 'dot' not found; wrote DOT files only (no SVG)", file=sys.stderr)
    written: list[Path] = []
    for stem, text in sources.items():
        dot_path = out / f"{stem}.dot"
        dot_path.write_text(text, encoding="utf-8")
        written.append(dot_path)
        if dot_binary is not None:
            svg_path = render_svg(dot_path, dot_binary)
            if svg_path is not None:
                written.append(svg_path)
    return written
