"""Fuzzing the trace reader: whatever the JSONL, reading, loading and sampling a trace raise nothing but a
TraceFormatError located at the offending line (or succeed)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from morphcache.engine.trace_sample import sample_trace
from morphcache.limits import Limits
from morphcache.workloads import TraceFormatError, load_trace

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LIMITS = Limits(trace_line_bytes=4096)


def _record(ts: int, ids: list[int]) -> dict[str, Any]:
    return {"timestamp": ts, "input_length": 512 * len(ids) - 100, "output_length": 8, "hash_ids": ids}


GOOD = [_record(0, [0, 1, 2]), _record(5, [0, 1, 3]), _record(9, [4, 5]), _record(12, [0, 1, 3, 6])]

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=8)
FIELDS = ["timestamp", "input_length", "output_length", "hash_ids"]
raw_lines = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"", b"null", b"[1, 2]", b"{", b"NaN", b'{"timestamp": Infinity}', b"\xff\xfe", b"[" * 3000,
                     b'{"hash_ids": [' + b"9" * 5000 + b"]}", b"x" * 5000]),
)


@st.composite
def traces(draw: st.DrawFn) -> bytes:
    """A valid trace with a few lines changed: a field set to any JSON value or dropped, a line
    replaced by raw bytes, lines blanked or duplicated."""
    lines = [json.dumps(r).encode() for r in GOOD]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.integers(0, 3))
        if kind == 0:
            record = json.loads(lines[i]) if lines[i].startswith(b"{") else {}
            if isinstance(record, dict):
                record[draw(st.sampled_from(FIELDS))] = draw(json_values)
            lines[i] = json.dumps(record, allow_nan=True).encode()
        elif kind == 1:
            record = dict(GOOD[i % len(GOOD)])
            del record[draw(st.sampled_from(FIELDS))]
            lines[i] = json.dumps(record).encode()
        elif kind == 2:
            lines[i] = draw(raw_lines)
        else:
            lines.insert(i, lines[i] if draw(st.booleans()) else b"   ")
    return b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")


@FUZZ
@given(data=traces())
def test_mutated_traces_give_located_errors_only(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path: Path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    path.write_bytes(data)
    n_lines = data.count(b"\n") + 1
    for read in (lambda: load_trace(path, block_tokens=4, limits=LIMITS),
                 lambda: sample_trace(path, limit=4, block_tokens=4, max_blocks=3, limits=LIMITS)):
        try:
            read()
        except TraceFormatError as exc:
            match = re.match(rf"^{re.escape(str(path))}:(\d+):(\d+): \S", str(exc))
            assert match and 1 <= int(match[1]) <= n_lines, str(exc)
            assert "\n" not in str(exc)
