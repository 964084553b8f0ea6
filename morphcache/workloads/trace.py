"""Replay workload from a Mooncake-format JSONL trace (../shared/traces/README.md).

Each line: {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}, one hash
id per 512-token block, the last block possibly partial. Each id expands into a deterministic
pseudo-random block of byte tokens seeded by the id, so equal ids give equal tokens.

Scale-down: with block_tokens = B each 512-token block becomes B tokens and lengths scale by B/512
(rounded up, so a partial last block stays non-empty)::

    input_length = 1100, hash_ids = [7, 8, 9], B = 16
    trace blocks   [ 7: 512 ][ 8: 512 ][ 9: 76 ]     1100 tokens
    scaled         [ 7: 16 ][ 8: 16 ][9: 3]           ceil(1100 * 16 / 512) = 35 tokens
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from morphcache.workloads.request import Request

TRACE_BLOCK_TOKENS = 512
_SALT = b"morphcache-trace-block"


class TraceFormatError(ValueError):
    """A trace line that cannot be read; the message starts with "file:line:"."""


def hash_block_tokens(hash_id: int, block_tokens: int = TRACE_BLOCK_TOKENS) -> tuple[int, ...]:
    """The first block_tokens byte tokens (0..255) of the pseudo-random stream of hash_id.

    Stable across platforms and versions (BLAKE2b in counter mode); a shorter block is a prefix of a
    longer one of the same id.
    """
    if hash_id < 0 or block_tokens < 0:
        raise ValueError(f"hash_id and block_tokens must be >= 0, got {hash_id}, {block_tokens}")
    out = bytearray()
    counter = 0
    while len(out) < block_tokens:
        msg = _SALT + hash_id.to_bytes(16, "little") + counter.to_bytes(8, "little")
        out += hashlib.blake2b(msg, digest_size=64).digest()
        counter += 1
    return tuple(out[:block_tokens])


def scaled_length(length: int, block_tokens: int) -> int:
    """A trace length in the scaled token space: ceil(length * block_tokens / 512)."""
    return -(-length * block_tokens // TRACE_BLOCK_TOKENS)


def _int_field(record: dict[str, Any], name: str, where: str) -> int:
    value = record.get(name)
    if value is None:
        raise TraceFormatError(f"{where}: missing field {name!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(f"{where}: {name} must be an integer, got {value!r}")
    if value < 0:
        raise TraceFormatError(f"{where}: {name} must be >= 0, got {value}")
    return value


def _parse_line(line: str, where: str) -> tuple[float, int, int, list[int]]:
    """(timestamp, input_length, output_length, hash_ids) of one trace line, validated."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise TraceFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    ts = record.get("timestamp")
    if ts is None:
        raise TraceFormatError(f"{where}: missing field 'timestamp'")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
        raise TraceFormatError(f"{where}: timestamp must be a finite number >= 0, got {ts!r}")
    input_length = _int_field(record, "input_length", where)
    output_length = _int_field(record, "output_length", where)
    ids = record.get("hash_ids")
    if ids is None:
        raise TraceFormatError(f"{where}: missing field 'hash_ids'")
    if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in ids):
        raise TraceFormatError(f"{where}: hash_ids must be a list of integers >= 0")
    need = -(-input_length // TRACE_BLOCK_TOKENS)
    if len(ids) != need:
        raise TraceFormatError(
            f"{where}: input_length {input_length} needs {need} hash_ids of {TRACE_BLOCK_TOKENS} tokens, "
            f"got {len(ids)}"
        )
    return float(ts), input_length, output_length, ids


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open("r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                yield lineno, line


def load_trace(
    path: str | os.PathLike[str],
    scale: float = 1.0,
    limit: int | None = None,
    block_tokens: int = TRACE_BLOCK_TOKENS,
) -> list[Request]:
    """Requests of a Mooncake-format JSONL trace, in file order.

    scale: multiplies the arrival timestamps (0.1 replays an hour in six minutes).
    limit: read at most this many requests (None: all).
    block_tokens: tokens per trace block after scale-down; input and output lengths scale by
    block_tokens / 512, rounded up. Request ids are "trace-{i}", i = 0-based request index.

    Raises FileNotFoundError for a missing file and TraceFormatError ("file:line: what") for a
    malformed line. Blank lines are skipped.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"trace file not found: {p}")
    if not (math.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    blocks: dict[int, tuple[int, ...]] = {}
    requests: list[Request] = []
    if limit == 0:
        return requests
    for lineno, line in _lines(p):
        ts, input_length, output_length, ids = _parse_line(line, f"{p}:{lineno}")
        tokens: list[int] = []
        for h in ids:
            block = blocks.get(h)
            if block is None:
                block = blocks[h] = hash_block_tokens(h, block_tokens)
            tokens.extend(block)
        del tokens[scaled_length(input_length, block_tokens) :]
        requests.append(
            Request(
                request_id=f"trace-{len(requests)}",
                arrival_ms=ts * scale,
                tokens=tuple(tokens),
                output_len=scaled_length(output_length, block_tokens),
            )
        )
        if limit is not None and len(requests) >= limit:
            break
    return requests
