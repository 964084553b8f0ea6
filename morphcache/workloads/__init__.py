"""Workloads: lists of Requests for the cache runtime and benchmarks.

- synthetic_chat: a bundled multi-turn chat with shared system prompts (byte tokens).
- load_trace: replay of a Mooncake-format JSONL trace, optionally scaled down for CPU runs.
"""

from morphcache.workloads.chat import SYSTEM_PROMPTS, synthetic_chat
from morphcache.workloads.request import Request, shared_prefix_len
from morphcache.workloads.trace import (
    TRACE_BLOCK_TOKENS,
    TraceFormatError,
    hash_block_tokens,
    load_trace,
    scaled_length,
)

__all__ = [
    "SYSTEM_PROMPTS",
    "TRACE_BLOCK_TOKENS",
    "Request",
    "TraceFormatError",
    "hash_block_tokens",
    "load_trace",
    "scaled_length",
    "shared_prefix_len",
    "synthetic_chat",
]
