"""The README's worked engine loop runs and prints what the README says it prints."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_embedding_example_runs_as_documented() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Embedding the runtime", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    expected = section.split("It prints:", 1)[1].split("```", 2)[1].strip()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
    assert out.getvalue().strip() == expected
