"""A bundled synthetic multi-turn chat workload (byte tokens, deterministic from a seed).

Each conversation starts from one of a few shared system prompts; turn i's prompt extends turn
i-1's prompt by the reply to it (exactly turn i-1's output_len tokens) and a new user message::

    turn 0:  [system][user 0]
    turn 1:  [system][user 0][reply 0][user 1]
    turn 2:  [system][user 0][reply 0][user 1][reply 1][user 2]

So prefixes are shared across turns of a conversation (the whole previous prompt) and across
conversations (the system prompt). Segment lengths vary and are not page-aligned, so prefix hits
land in the middle of pages.  Each request is typed: its segments are spans of type ``system``,
``user`` and ``response``, its session is the conversation (``chat{c}``) and its task ``chat``.
"""

from __future__ import annotations

import random

from morphcache.workloads.request import Request

SYSTEM_PROMPTS: tuple[str, ...] = (
    "System: You are a helpful assistant. Answer briefly and precisely.",
    "System: You are a code reviewer. Point out bugs first, style issues second, and cite line numbers.",
    "System: You translate English to French. Keep the tone and formatting of the source text.",
    "System: You are a support agent for a cloud storage product. Be polite, ask for the account id "
    "before discussing billing, and never promise refunds.",
)

_WORDS: tuple[str, ...] = (
    "the", "cache", "page", "block", "token", "prefix", "window", "layer", "query", "key", "value",
    "is", "was", "will", "can", "not", "and", "or", "but", "with", "from", "into", "over", "under",
    "fast", "slow", "stale", "ready", "evicted", "pinned", "host", "disk", "gpu", "memory", "hit",
    "miss", "request", "reply", "model", "server", "please", "explain", "why", "how", "what",
    "when", "this", "that", "again", "thanks", "sure", "here", "step", "first", "then", "finally",
)


def _text(rng: random.Random, n_tokens: int) -> str:
    """Pseudo-English of exactly n_tokens bytes."""
    words: list[str] = []
    joined_len = -1  # len(" ".join(words))
    while joined_len < n_tokens:
        word = rng.choice(_WORDS)
        words.append(word)
        joined_len += len(word) + 1
    return " ".join(words)[:n_tokens]


def _encode(text: str) -> tuple[int, ...]:
    return tuple(text.encode("ascii"))


def synthetic_chat(
    seed: int,
    n_conversations: int,
    turns: int,
    *,
    n_system_prompts: int = 3,
    user_len: tuple[int, int] = (8, 60),
    reply_len: tuple[int, int] = (20, 120),
    mean_gap_ms: float = 250.0,
    think_ms: tuple[float, float] = (500.0, 3000.0),
) -> list[Request]:
    """Requests of n_conversations chats of `turns` turns each, sorted by (arrival_ms, request_id).

    user_len / reply_len: inclusive byte-length ranges of user messages (without the "User: "
    marker) and replies (including the "Assistant: " marker; the reply length is the previous
    turn's output_len). Conversations start with exponential gaps of mean mean_gap_ms; a turn
    arrives think_ms (uniform) after the previous one. Request ids are "chat{c}-turn{i}".
    """
    if n_conversations < 0 or turns < 1:
        raise ValueError(f"need n_conversations >= 0 and turns >= 1, got {n_conversations}, {turns}")
    if not 1 <= n_system_prompts <= len(SYSTEM_PROMPTS):
        raise ValueError(f"n_system_prompts must be in 1..{len(SYSTEM_PROMPTS)}, got {n_system_prompts}")
    marker = len("\nAssistant: ")
    if not (1 <= user_len[0] <= user_len[1] and marker < reply_len[0] <= reply_len[1]):
        raise ValueError(f"bad length ranges user_len={user_len} reply_len={reply_len}")
    rng = random.Random(seed)
    requests: list[Request] = []
    start = 0.0
    for conv in range(n_conversations):
        start += rng.expovariate(1.0 / mean_gap_ms) if mean_gap_ms > 0 else 0.0
        prompt = _encode(SYSTEM_PROMPTS[rng.randrange(n_system_prompts)])
        spans: tuple[tuple[int, int, str], ...] = ((0, len(prompt), "system"),)
        arrival = start
        for turn in range(turns):
            user = "\nUser: " + _text(rng, rng.randint(*user_len))
            spans += ((len(prompt), len(prompt) + len(user), "user"),)
            prompt = prompt + _encode(user)
            output_len = rng.randint(*reply_len)
            requests.append(Request(f"chat{conv}-turn{turn}", round(arrival, 3), prompt, output_len, spans,
                                    f"chat{conv}", "chat"))
            reply = "\nAssistant: " + _text(rng, output_len - marker)
            spans += ((len(prompt), len(prompt) + len(reply), "response"),)
            prompt = prompt + _encode(reply)
            arrival += rng.uniform(*think_ms)
    requests.sort(key=lambda r: (r.arrival_ms, r.request_id))
    return requests
