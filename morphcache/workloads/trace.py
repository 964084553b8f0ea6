"""Replay workload from a Mooncake-format JSONL trace (../shared/traces/README.md).

Each line: {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}, one hash
id per 512-token block, the last block possibly partial. Each id expands into a deterministic
pseudo-random block of byte tokens seeded by the id, so equal ids give equal tokens.

Scale-down: with block_tokens = B each 512-token block becomes B tokens and lengths scale by B/512
(rounded up, so a partial last block stays non-empty)::

    input_length = 1100, hash_ids = [7, 8, 9], B = 16
    trace blocks   [ 7: 512 ][ 8: 512 ][ 9: 76 ]     1100 tokens
    scaled         [ 7: 16 ][ 8: 16 ][9: 3]           ceil(1100 * 16 / 512) = 35 tokens

Every problem in a line is a :class:`TraceFormatError` at ``file:line:col`` (the column of the
offending field where it can be found).  Lines longer than ``trace_line_bytes`` are refused before
they are parsed; hash ids are 64-bit (``0 <= id < 2**64``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from morphcache.errors import LocatedError
from morphcache.limits import DEFAULT, Limits
from morphcache.workloads.request import Request

TRACE_BLOCK_TOKENS = 512
MAX_HASH_ID = 2**64 - 1
MAX_LENGTH = 2**63 - 1
_SALT = b"morphcache-trace-block"


class TraceFormatError(LocatedError):
    """A trace that cannot be used: ``file:line:col: what`` (a malformed line, or nothing to replay)."""


@dataclass(frozen=True)
class TraceRecord:
    """One validated trace line; ``line`` is its 1-based line number in the file."""

    line: int
    timestamp: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def hash_block_tokens(hash_id: int, block_tokens: int = TRACE_BLOCK_TOKENS) -> tuple[int, ...]:
    """The first block_tokens byte tokens (0..255) of the pseudo-random stream of hash_id.

    Stable across platforms and versions (BLAKE2b in counter mode); a shorter block is a prefix of a
    longer one of the same id.
    """
    if not 0 <= hash_id <= MAX_HASH_ID or block_tokens < 0:
        raise ValueError(f"hash_id must be in [0, 2**64) and block_tokens >= 0, got {hash_id}, {block_tokens}")
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


class _Line:
    """One raw line and where it is, to locate its problems."""

    def __init__(self, path: str, number: int, text: str) -> None:
        self.path = path
        self.number = number
        self.text = text

    def error(self, message: str, field: str | None = None, col: int = 1) -> TraceFormatError:
        if field is not None:
            col = self.text.find(f'"{field}"') + 1 or 1
        return TraceFormatError(self.path, self.number, col, message)

    def length(self, record: dict[str, Any], name: str) -> int:
        if name not in record:
            raise self.error(f"missing field {name!r}")
        value = record[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"{name} must be an integer, got {_short(value)}", name)
        if value < 0:
            raise self.error(f"{name} must be >= 0, got {value}", name)
        if value > MAX_LENGTH:
            raise self.error(f"{name} must be below 2**63, got {_short(value)}", name)
        return value


def _short(value: Any) -> str:
    """``value`` as JSON (as the trace wrote it), cut to 40 characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _parse_line(line: _Line) -> TraceRecord:
    """The validated record of one non-blank line."""
    try:
        record = json.loads(line.text)
    except json.JSONDecodeError as exc:
        raise line.error(f"invalid JSON ({exc.msg})", col=exc.colno) from None
    except RecursionError:
        raise line.error("JSON nests too deeply to read") from None
    except ValueError:  # json reads numbers with int(), which refuses more than 4300 digits
        raise line.error("a JSON number has too many digits to read") from None
    if not isinstance(record, dict):
        raise line.error(f"expected a JSON object, got {'null' if record is None else type(record).__name__}")
    if "timestamp" not in record:
        raise line.error("missing field 'timestamp'")
    ts = record["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
        raise line.error(f"timestamp must be a finite number >= 0, got {_short(ts)}", "timestamp")
    input_length = line.length(record, "input_length")
    output_length = line.length(record, "output_length")
    if "hash_ids" not in record:
        raise line.error("missing field 'hash_ids'")
    ids = record["hash_ids"]
    if not isinstance(ids, list):
        raise line.error(f"hash_ids must be a list of integers in [0, 2**64), got {_short(ids)}", "hash_ids")
    for i, h in enumerate(ids):
        if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= MAX_HASH_ID:
            raise line.error(f"hash_ids[{i}] must be an integer in [0, 2**64), got {_short(h)}", "hash_ids")
    need = -(-input_length // TRACE_BLOCK_TOKENS)
    if len(ids) != need:
        raise line.error(f"input_length {input_length} needs {need} hash_ids of {TRACE_BLOCK_TOKENS} tokens, "
                         f"got {len(ids)}", "hash_ids")
    return TraceRecord(line.number, float(ts), input_length, output_length, tuple(ids))


def read_records(path: str | os.PathLike[str], limits: Limits | None = None) -> Iterator[TraceRecord]:
    """The validated records of the JSONL trace at ``path``, in file order (blank lines skipped).

    Raises FileNotFoundError for a missing file and :class:`TraceFormatError` for a line that is too
    long (``trace_line_bytes``), not UTF-8, not JSON, or not a valid record.
    """
    limits = limits or DEFAULT
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"trace file not found: {p}")
    cap = limits.trace_line_bytes
    with p.open("rb") as f:
        number = 0
        while raw := f.readline(cap + 1):
            number += 1
            if len(raw) > cap and not (len(raw) == cap + 1 and raw.endswith(b"\n")):
                raise TraceFormatError(str(p), number, 1, limits.exceeded(
                    "trace_line_bytes", f"the line is longer than {cap} bytes"))
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TraceFormatError(str(p), number, exc.start + 1,
                                       f"not UTF-8 text (byte 0x{raw[exc.start]:02x})") from None
            if text.strip():
                yield _parse_line(_Line(str(p), number, text))


def to_request(record: TraceRecord, index: int, scale: float, block_tokens: int,
               blocks: dict[int, tuple[int, ...]] | None = None) -> Request:
    """The scaled-down request ``trace-{index}`` of ``record`` (``blocks`` caches expanded hash ids)."""
    blocks = {} if blocks is None else blocks
    tokens: list[int] = []
    for h in record.hash_ids:
        block = blocks.get(h)
        if block is None:
            block = blocks[h] = hash_block_tokens(h, block_tokens)
        tokens.extend(block)
    del tokens[scaled_length(record.input_length, block_tokens) :]
    return Request(
        request_id=f"trace-{index}",
        arrival_ms=record.timestamp * scale,
        tokens=tuple(tokens),
        output_len=scaled_length(record.output_length, block_tokens),
    )


def load_trace(
    path: str | os.PathLike[str],
    scale: float = 1.0,
    limit: int | None = None,
    block_tokens: int = TRACE_BLOCK_TOKENS,
    limits: Limits | None = None,
) -> list[Request]:
    """Requests of a Mooncake-format JSONL trace, in file order.

    scale: multiplies the arrival timestamps (0.1 replays an hour in six minutes).
    limit: read at most this many requests (None: all).
    block_tokens: tokens per trace block after scale-down; input and output lengths scale by
    block_tokens / 512, rounded up. Request ids are "trace-{i}", i = 0-based request index.

    Raises FileNotFoundError for a missing file, ValueError for a bad argument and
    TraceFormatError ("file:line:col: what") for a malformed line. Blank lines are skipped.
    """
    if not (math.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    requests: list[Request] = []
    if limit == 0:
        if not Path(path).is_file():
            raise FileNotFoundError(f"trace file not found: {path}")
        return requests
    blocks: dict[int, tuple[int, ...]] = {}
    for record in read_records(path, limits):
        requests.append(to_request(record, len(requests), scale, block_tokens, blocks))
        if limit is not None and len(requests) >= limit:
            break
    return requests
