"""The bad-input corpus: every case gives exactly one line on stderr, its expected location and exit 2.

Each case is a file under ``corpus/``:

* ``specs/*.yaml``: ``morphcache check CASE`` (files in ``specs/parents/`` are only extended);
* ``traces/*.jsonl``: ``morphcache simulate --trace CASE``, with its header in ``NAME.expect``;
* ``cli/*.cli``: a command line and nothing else.

A header is a run of ``# key: value`` lines at the top: ``expect`` (the whole stderr line) and
optionally ``args`` (the command line, replacing the default).  In both, ``{case}`` is the case
file, ``{dir}`` its folder and ``{root}`` the repository.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from morphcache.cli import main

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "corpus"
DEFAULT_ARGS = {".yaml": "check {case}", ".jsonl": "simulate --trace {case} --no-progress --ops reference"}


def cases() -> list[Path]:
    """Every case file of the corpus."""
    return sorted([*(CORPUS / "specs").glob("*.yaml"), *(CORPUS / "traces").glob("*.jsonl"),
                   *(CORPUS / "cli").glob("*.cli")])


def header(case: Path) -> dict[str, str]:
    """The ``# key: value`` lines at the top of the case (or of its ``.expect`` sidecar)."""
    source = case.with_suffix(".expect") if case.suffix == ".jsonl" else case
    if not source.exists():
        return {}
    out: dict[str, str] = {}
    for line in source.read_bytes().decode("latin-1").splitlines():
        if not line.startswith("# ") or ": " not in line:
            break
        key, value = line[2:].split(": ", 1)
        out[key] = value
    return out


def expand(text: str, case: Path) -> str:
    return text.replace("{case}", str(case)).replace("{dir}", str(case.parent)).replace("{root}", str(ROOT))


def test_the_corpus_is_large_and_every_case_has_an_expected_line() -> None:
    found = cases()
    assert len(found) >= 40
    kinds = {p.parent.name for p in found}
    assert kinds == {"specs", "traces", "cli"}
    for case in found:
        assert "expect" in header(case), f"{case} has no '# expect:' line"


@pytest.mark.parametrize("case", cases(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_bad_input_gives_one_located_line_and_exit_2(case: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = header(case)
    argv = [expand(arg, case) for arg in shlex.split(head.get("args", DEFAULT_ARGS.get(case.suffix, "")))]
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert captured.err == expand(head["expect"], case) + "\n"
    assert code == 2


def test_input_errors_are_caught_in_one_place() -> None:
    """Bad input travels as an InputError to the command line's single handler; nothing catches it on
    the way (a handler elsewhere could print a second line, or swallow the exit status)."""
    handlers = []
    for folder in ("morphcache", "spec", "proofs", "runtime"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if re.search(r"except .*\b(InputError|LocatedError|SpecError|TraceFormatError|UsageError)\b", line):
                    handlers.append(f"{path.relative_to(ROOT)}:{number}")
    assert handlers == ["morphcache/cli.py:" + str(_handler_line())]


def _handler_line() -> int:
    lines = (ROOT / "morphcache" / "cli.py").read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, start=1) if "except InputError" in line)
