"""The training corpus: the Python standard library's sources (with their docstrings and the
``pydoc_data`` documentation topics) of the running interpreter, as bytes.

Files are taken in sorted order of their path relative to the stdlib directory; test suites,
site-packages, caches and the build-specific ``_sysconfigdata*`` / ``config-*`` files are left out.
Every HELD_OUT_EVERY-th file goes to the held-out split (never trained on)::

    sorted files   f0  f1  f2 ... f19 | f20 f21 ...
    split          H   T   T  ...  T  | H   T   ...      (H: held out, T: train; index % 20 == 0)

The sha256 covers every path and byte in order, so a different corpus (another Python version)
is detected by its digest.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HELD_OUT_EVERY = 20
SEPARATOR = b"\n\n"
EXCLUDED_DIRS = frozenset({"site-packages", "test", "tests", "idle_test", "__pycache__"})


@dataclass(frozen=True)
class Corpus:
    """Train and held-out bytes (uint8 arrays) and the digest of the whole corpus."""

    train: np.ndarray
    held_out: np.ndarray
    sha256: str
    n_files: int
    root: str

    def describe(self) -> str:
        return (
            f"{self.n_files} files under {self.root}, sha256 {self.sha256[:16]}..., "
            f"train {len(self.train):,} bytes, held-out {len(self.held_out):,} bytes"
        )


def corpus_files(root: Path) -> list[Path]:
    """The corpus files under root, sorted by relative path."""
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if EXCLUDED_DIRS.intersection(rel.parts[:-1]) or rel.parts[0].startswith("config-"):
            continue
        if rel.name.startswith("_sysconfigdata"):
            continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def load_corpus(root: Path | None = None) -> Corpus:
    """Read the corpus (default: this interpreter's stdlib) and split it."""
    base = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    files = corpus_files(base)
    if not files:
        raise ValueError(f"no corpus files under {base}")
    digest = hashlib.sha256()
    parts: tuple[list[bytes], list[bytes]] = ([], [])
    for i, path in enumerate(files):
        data = path.read_bytes()
        digest.update(path.relative_to(base).as_posix().encode() + b"\0" + data + b"\0")
        parts[i % HELD_OUT_EVERY == 0].append(data)
    train, held = (np.frombuffer(SEPARATOR.join(p), dtype=np.uint8).copy() for p in parts)
    return Corpus(train, held, digest.hexdigest(), len(files), str(base))
