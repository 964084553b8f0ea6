"""A CPU-sized sample of a Mooncake trace that keeps its prefix reuse.

The trace is an hour of traffic; most early requests share only their first block, and a
conversation's next turn arrives minutes later.  Replaying the first N lines would show almost no
reuse, so the sample follows conversations instead::

    walk the lines in order; a line whose hash ids start with >= 2 blocks seen before continues an
    earlier line (the one that introduced its last shared block): take both
    stop once N lines are taken; replay them in trace order

Each request is then cut to its first ``max_blocks`` blocks (a prefix of a prefix is still a
prefix, so the sharing survives) and scaled to ``block_tokens`` tokens per 512-token block
(``load_trace``'s scale-down).

A trace with no requests, or none that continues an earlier one, has nothing to replay: that is a
:class:`~morphcache.workloads.TraceFormatError` rather than a report of zeros.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from morphcache.limits import Limits
from morphcache.workloads import Request
from morphcache.workloads.trace import TraceFormatError, TraceRecord, read_records, to_request

MIN_SHARED_BLOCKS = 2


@dataclass(frozen=True)
class TraceSample:
    """The sampled requests and where they came from (1-based line numbers in the trace file)."""

    requests: tuple[Request, ...]
    lines: tuple[int, ...]
    block_tokens: int
    max_blocks: int


def _conversations(path: str | os.PathLike[str], limit: int, max_blocks: int,
                   limits: Limits | None) -> tuple[list[TraceRecord], list[int]]:
    """The records read and the indices (into them) of the sampled ones, in trace order."""
    introduced: dict[int, int] = {}
    chosen: set[int] = set()
    records: list[TraceRecord] = []
    for i, record in enumerate(read_records(path, limits)):
        records.append(record)
        ids = record.hash_ids[:max_blocks]
        shared = 0
        while shared < len(ids) and ids[shared] in introduced:
            shared += 1
        if shared >= MIN_SHARED_BLOCKS:
            parent = introduced[ids[shared - 1]]
            chosen.update(x for x in (parent, i) if len(chosen | {x}) <= limit)
        for h in ids:
            introduced.setdefault(h, i)
        if len(chosen) >= limit:
            break
    return records, sorted(chosen)


def conversation_lines(path: str | os.PathLike[str], limit: int, max_blocks: int,
                       limits: Limits | None = None) -> list[int]:
    """Line numbers (1-based) of the first ``limit`` requests that continue an earlier request, with
    the requests they continue (see the module docstring)."""
    records, chosen = _conversations(path, limit, max_blocks, limits)
    return [records[i].line for i in chosen]


def sample_trace(path: str | os.PathLike[str], *, limit: int, block_tokens: int, max_blocks: int,
                 limits: Limits | None = None) -> TraceSample:
    """The sampled, cut and scaled requests of the trace at ``path``.

    Raises FileNotFoundError for a missing file and TraceFormatError for a malformed line, a trace
    without requests, or one in which no request continues an earlier one.
    """
    if limit < 1 or block_tokens < 1 or max_blocks < 1:
        raise ValueError(f"limit, block_tokens and max_blocks must be >= 1, got {limit}, {block_tokens}, "
                         f"{max_blocks}")
    records, chosen = _conversations(path, limit, max_blocks, limits)
    if not records:
        raise TraceFormatError(str(path), 1, 1, "the trace has no requests: nothing to replay")
    if not chosen:
        raise TraceFormatError(str(path), 1, 1, f"no request continues an earlier one (shares its first "
                               f"{MIN_SHARED_BLOCKS} or more hash ids, within the first {max_blocks} blocks): "
                               "no prefix reuse to replay")
    cap = max_blocks * block_tokens
    out = []
    for i in chosen:
        r = to_request(dataclasses.replace(records[i], hash_ids=records[i].hash_ids[:max_blocks]), i, 1.0,
                       block_tokens)
        out.append(Request(r.request_id, r.arrival_ms, r.tokens[:cap], r.output_len))
    return TraceSample(tuple(out), tuple(records[i].line for i in chosen), block_tokens, max_blocks)
