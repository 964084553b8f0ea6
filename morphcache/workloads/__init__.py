"""Workloads: lists of Requests for the cache runtime and benchmarks.

- synthetic_chat: a bundled multi-turn chat with shared system prompts (byte tokens).
- load_trace: replay of a Mooncake-format JSONL trace, optionally scaled down for CPU runs.
- typed workloads (TypedRequest: tokens with type spans, session, task, arrival order):
  multi_turn_chat, reasoning_chat, agentic, templated, typed_mixture, shifting_mixture, and
  trace_workload (the Mooncake trace, untyped, conversations inferred).
"""

from morphcache.workloads.agentic import agentic
from morphcache.workloads.chat import SYSTEM_PROMPTS, synthetic_chat
from morphcache.workloads.conversations import multi_turn_chat, reasoning_chat
from morphcache.workloads.mixtures import phase_of, shifting_mixture, typed_mixture
from morphcache.workloads.request import Request, shared_prefix_len
from morphcache.workloads.templated import templated
from morphcache.workloads.trace import (
    TRACE_BLOCK_TOKENS,
    TraceFormatError,
    hash_block_tokens,
    load_trace,
    scaled_length,
)
from morphcache.workloads.trace_typed import trace_workload
from morphcache.workloads.typed import TOKEN_TYPES, TokenSpan, TypedRequest, TypedWorkload, WorkloadError

__all__ = [
    "SYSTEM_PROMPTS",
    "TOKEN_TYPES",
    "TRACE_BLOCK_TOKENS",
    "Request",
    "TokenSpan",
    "TraceFormatError",
    "TypedRequest",
    "TypedWorkload",
    "WorkloadError",
    "agentic",
    "hash_block_tokens",
    "load_trace",
    "multi_turn_chat",
    "phase_of",
    "reasoning_chat",
    "scaled_length",
    "shared_prefix_len",
    "shifting_mixture",
    "synthetic_chat",
    "templated",
    "trace_workload",
    "typed_mixture",
]
