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
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from morphcache.workloads import Request, load_trace

MIN_SHARED_BLOCKS = 2


@dataclass(frozen=True)
class TraceSample:
    """The sampled requests and where they came from (0-based trace line numbers)."""

    requests: tuple[Request, ...]
    lines: tuple[int, ...]
    block_tokens: int
    max_blocks: int


def conversation_lines(path: str | os.PathLike[str], limit: int, max_blocks: int) -> list[int]:
    """Line numbers of the first ``limit`` requests that continue an earlier request, with the
    requests they continue (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"trace file not found: {p}")
    introduced: dict[int, int] = {}
    chosen: set[int] = set()
    with p.open("r", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            ids = json.loads(line).get("hash_ids", [])[:max_blocks]
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
    return sorted(chosen)


def sample_trace(path: str | os.PathLike[str], *, limit: int, block_tokens: int, max_blocks: int) -> TraceSample:
    """The sampled, cut and scaled requests of the trace at ``path``."""
    if limit < 1 or block_tokens < 1 or max_blocks < 1:
        raise ValueError(f"limit, block_tokens and max_blocks must be >= 1, got {limit}, {block_tokens}, "
                         f"{max_blocks}")
    lines = conversation_lines(path, limit, max_blocks)
    if not lines:
        return TraceSample((), (), block_tokens, max_blocks)
    every = load_trace(path, limit=lines[-1] + 1, block_tokens=block_tokens)
    cap = max_blocks * block_tokens
    out = []
    for i in lines:
        r = every[i]
        out.append(Request(r.request_id, r.arrival_ms, r.tokens[:cap], r.output_len))
    return TraceSample(tuple(out), tuple(lines), block_tokens, max_blocks)
