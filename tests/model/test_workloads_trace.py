"""The Mooncake-format trace loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from morphcache.workloads import TraceFormatError, hash_block_tokens, load_trace, scaled_length

REAL_TRACE = Path(__file__).resolve().parent / "data" / "mooncake_conversation_head.jsonl"
"""The first 50 requests of the Mooncake FAST'25 "conversation" trace (kvcache-ai/Mooncake, Apache License 2.0)."""


def _write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def _rec(ts: float, n_in: int, n_out: int, ids: list[int]) -> str:
    return json.dumps({"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids})


GOOD = [
    _rec(0, 1100, 40, [0, 1, 2]),
    _rec(5, 1024, 3, [0, 1]),
    "",
    _rec(12, 600, 512, [0, 9]),
]


def test_hash_blocks_are_deterministic_bytes_and_prefix_stable() -> None:
    a = hash_block_tokens(42)
    assert len(a) == 512 and all(0 <= t <= 255 for t in a)
    assert a == hash_block_tokens(42)
    assert a != hash_block_tokens(43)
    assert hash_block_tokens(42, 16) == a[:16]


def test_full_scale_expansion(tmp_path: Path) -> None:
    reqs = load_trace(_write(tmp_path, GOOD))
    assert [r.request_id for r in reqs] == ["trace-0", "trace-1", "trace-2"]
    assert [r.prompt_len for r in reqs] == [1100, 1024, 600]
    assert [r.output_len for r in reqs] == [40, 3, 512]
    assert [r.arrival_ms for r in reqs] == [0.0, 5.0, 12.0]
    b0, b1 = hash_block_tokens(0), hash_block_tokens(1)
    assert reqs[0].tokens == b0 + b1 + hash_block_tokens(2)[:76]
    assert reqs[1].tokens == b0 + b1  # equal ids -> equal tokens: the shared prefix is reusable
    assert reqs[2].tokens[:512] == b0 and reqs[2].tokens[512:] == hash_block_tokens(9)[:88]


def test_scaled_down(tmp_path: Path) -> None:
    reqs = load_trace(_write(tmp_path, GOOD), scale=0.5, limit=2, block_tokens=16)
    assert len(reqs) == 2
    assert [r.prompt_len for r in reqs] == [35, 32]  # ceil(1100 * 16 / 512), 1024 / 32
    assert [r.output_len for r in reqs] == [2, 1]  # ceil(40 / 32), ceil(3 / 32)
    assert [r.arrival_ms for r in reqs] == [0.0, 2.5]
    assert reqs[0].tokens == hash_block_tokens(0, 16) + hash_block_tokens(1, 16) + hash_block_tokens(2, 3)
    assert reqs[1].tokens == reqs[0].tokens[:32]
    assert scaled_length(0, 16) == 0 and scaled_length(1, 16) == 1
    assert load_trace(_write(tmp_path, GOOD), limit=0) == []


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="trace file not found"):
        load_trace(tmp_path / "nope.jsonl")


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"input_length": 1, "output_length": 1, "hash_ids": [0]}), "missing field 'timestamp'"),
        (json.dumps({"timestamp": 0, "output_length": 1, "hash_ids": [0]}), "missing field 'input_length'"),
        (_rec(-1, 10, 1, [0]), "timestamp must be"),
        (_rec(0, 10, -2, [0]), "output_length must be >= 0"),
        (json.dumps({"timestamp": 0, "input_length": "9", "output_length": 1, "hash_ids": [0]}),
         "input_length must be an integer"),
        (json.dumps({"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": 3}),
         "hash_ids must be"),
        (_rec(0, 10, 1, [0, "a"]), "hash_ids[1] must be"),  # type: ignore[list-item]
        (_rec(0, 1100, 1, [0, 1]), "needs 3 hash_ids"),
        (_rec(0, 100, 1, [0, 1]), "needs 1 hash_ids"),
    ],
)
def test_malformed_line_reports_file_line_and_problem(tmp_path: Path, line: str, what: str) -> None:
    path = _write(tmp_path, [GOOD[0], "", line])
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    assert str(err.value).startswith(f"{path}:3:")
    assert what in str(err.value)


def test_bad_arguments(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    with pytest.raises(ValueError, match="block_tokens"):
        load_trace(path, block_tokens=0)
    with pytest.raises(ValueError, match="limit"):
        load_trace(path, limit=-1)
    with pytest.raises(ValueError, match="scale"):
        load_trace(path, scale=-1.0)


def test_real_trace_head_scaled_down() -> None:
    reqs = load_trace(REAL_TRACE, limit=50, block_tokens=16)
    assert len(reqs) == 50
    assert all(0 < r.prompt_len <= 16 * 300 for r in reqs)
    # the first block id (0) is shared by the opening requests: their first scaled block is equal
    assert reqs[0].tokens[:16] == reqs[1].tokens[:16]
