"""The Mooncake conversation trace as a typed workload: untyped tokens, inferred conversations.

The trace has no token types and no conversation ids.  Each line becomes an untyped request (no
spans) whose tokens come from ``load_trace``; its output is a run of fresh tokens (the trace does
not say what was decoded, and a next turn's blocks are new ids anyway).  The conversation is
inferred from the hash ids: a request whose ids extend all the *full* blocks of an earlier request
(every id but that request's last, possibly partial, block) continues that request's conversation
(the longest such prefix wins).  A one-block prefix does not count: every request of the trace
starts with the same block (a shared system prompt)::

    request 7    ids [0, 11, 12, 13]          a new conversation, "trace-s7"
    request 9    ids [0, 11, 12, 40, 41]      extends 7's full blocks [0, 11, 12]: "trace-s7"

On the shared trace this finds 3,974 follow-up turns in 8,057 conversations.
"""

from __future__ import annotations

import os

from morphcache.workloads.trace import TRACE_BLOCK_TOKENS, load_trace, read_records
from morphcache.workloads.typed import TypedRequest, TypedWorkload, content


def infer_sessions(ids_per_request: list[list[int]]) -> list[int]:
    """For each request, the index of the request that started its conversation."""
    full_prefix: dict[tuple[int, ...], int] = {}  # full blocks of a request -> that request
    root: list[int] = []
    for i, ids in enumerate(ids_per_request):
        parent = None
        for k in range(len(ids), 1, -1):
            parent = full_prefix.get(tuple(ids[:k]))
            if parent is not None:
                break
        root.append(root[parent] if parent is not None else i)
        if len(ids) > 2:
            full_prefix[tuple(ids[:-1])] = i
    return root


def trace_workload(path: str | os.PathLike[str], *, block_tokens: int = 16, limit: int | None = None,
                   sessions: bool = True) -> TypedWorkload:
    """The trace (see ``load_trace`` for the scale-down) as untyped requests of task ``"trace"``.

    ``sessions`` False gives every request its own session.
    """
    plain = load_trace(path, block_tokens=block_tokens, limit=limit)
    ids: list[list[int]] = []
    for record in read_records(path):
        if len(ids) == len(plain):
            break
        ids.append(list(record.hash_ids))
    roots = infer_sessions(ids) if sessions else list(range(len(plain)))
    requests = tuple(
        TypedRequest(req.request_id, i, req.arrival_ms, f"trace-s{roots[i]}", "trace", req.tokens, (),
                     content(f"trace-output:{i}", req.output_len), ())
        for i, req in enumerate(plain))
    scale = max(1, TRACE_BLOCK_TOKENS // block_tokens)
    return TypedWorkload("mooncake", requests, scale, "Mooncake conversation trace (untyped)")
