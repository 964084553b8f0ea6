"""Multi-turn conversations: plain chat and chat with a reasoning (chain-of-thought) model.

Every conversation opens with one of a few shared system prompts; turn i's prompt is the whole
visible history plus a new user message, and its output is the model's reply::

    chat        prompt_i = [system][user 0][response 0] ... [user i]      output_i = [response i]
    reasoning   prompt_i = [system][user 0][response 0] ... [user i]      output_i = [reasoning i][response i]

What is reused, and why (the assumption each generator encodes):

* the system prompt: by every conversation of the same deployment (structural reuse);
* a plain chat reply: by the next turn, which extends the prompt by exactly the reply (session
  reuse); the last turn's reply is never reused;
* a reasoning model's output: never.  Reasoning APIs drop earlier turns' reasoning from the next
  turn's context (DeepSeek API guide, "Reasoning model": the reasoning content of earlier rounds is
  not concatenated into the context), so the next prompt holds the reply at a position where the
  reasoning used to be: neither the reasoning pages nor the reply pages behind them match again.

Published figures used (lengths are real tokens; the generator emits one token per
``token_scale``):

* turns per conversation: geometric, mean 2.0 (LMSYS-Chat-1M, Zheng et al., ICLR 2024, Table 1:
  2.0 turns per conversation on average);
* user message: log-normal, mean about 70 (LMSYS-Chat-1M: 69.5 tokens per prompt), sigma 1.0;
* reply: log-normal, mean about 215 (LMSYS-Chat-1M: 214.5 tokens per response), sigma 0.8;
* time between turns: log-normal with log-mean 4.88 and log-sigma 0.98 (seconds; median about
  2 minutes), fitted to the 3,974 follow-up turns found in the Mooncake conversation trace
  (``../shared/traces``: a request whose block hashes extend an earlier request's full blocks is
  taken as that conversation's next turn);
* reasoning: log-normal, median 2,000 real tokens, sigma 0.8, capped at 32K (the DeepSeek
  reasoner's chain of thought "can reach up to 32K tokens").

Assumptions (not published figures): system prompts are a few hundred to a few thousand tokens
(log-normal, median 800, sigma 0.5); 8 deployments with Zipf(1) popularity; conversations start
as a Poisson process.
"""

from __future__ import annotations

import math
import random

from morphcache.workloads.typed import (
    Draft,
    Segments,
    TypedWorkload,
    content,
    finish,
    geometric,
    lognormal_tokens,
    poisson_starts,
    zipf_choice,
)

THINK_LOG_MU = 4.88  # ln(seconds) between turns, Mooncake conversation trace
THINK_LOG_SIGMA = 0.98


def _lognormal_mean_median(mean: float, sigma: float) -> float:
    """The median of a log-normal with this mean and log-sigma."""
    return mean / math.exp(sigma * sigma / 2)


def conversation_drafts(seed: int, sessions: int, *, task: str = "chat", reasoning: bool = False,
                        token_scale: int = 16, start_ms: float = 0.0, span_ms: float = 600_000.0,
                        mean_turns: float = 2.0, system_prompts: int = 8, system_median: float = 800.0,
                        reasoning_median: float = 2000.0) -> list[Draft]:
    """Drafts of ``sessions`` conversations starting (Poisson) within ``[start_ms, start_ms + span_ms)``."""
    rng = random.Random(f"{task}:{seed}")
    user_median = _lognormal_mean_median(70.0, 1.0)
    reply_median = _lognormal_mean_median(215.0, 0.8)
    sys_lengths = [lognormal_tokens(random.Random(f"sys-len:{task}:{k}"), system_median, 0.5, token_scale)
                   for k in range(system_prompts)]
    drafts: list[Draft] = []
    for s, t in poisson_starts(rng, sessions, start_ms, span_ms):
        sid = f"{task}{seed}-s{s}"
        k = zipf_choice(rng, system_prompts, 1.0)
        history = Segments()
        history.add("system", content(f"system:{task}:{k}", sys_lengths[k]))
        arrival = t
        turns = geometric(rng, mean_turns, 40)
        for i in range(turns):
            history.add("user", content(f"{sid}:user{i}", lognormal_tokens(rng, user_median, 1.0, token_scale)))
            output = Segments()
            if reasoning:
                output.add("reasoning", content(f"{sid}:think{i}",
                                                lognormal_tokens(rng, reasoning_median, 0.8, token_scale, hi=32_768)))
            reply = content(f"{sid}:reply{i}", lognormal_tokens(rng, reply_median, 0.8, token_scale))
            output.add("response", reply)
            drafts.append(Draft(arrival, f"{sid}-t{i}", sid, task, history.copy(), output))
            history.add("response", reply)
            arrival += 1000.0 * rng.lognormvariate(THINK_LOG_MU, THINK_LOG_SIGMA)
    return drafts


def multi_turn_chat(seed: int, sessions: int = 300, *, token_scale: int = 16, span_ms: float = 600_000.0,
                    mean_turns: float = 2.0) -> TypedWorkload:
    """Multi-turn chat: ``sessions`` conversations over ``span_ms`` (see the module docstring)."""
    drafts = conversation_drafts(seed, sessions, task="chat", token_scale=token_scale, span_ms=span_ms,
                                 mean_turns=mean_turns)
    return finish("chat", drafts, token_scale, "multi-turn chat; replies reused by the next turn")


def reasoning_chat(seed: int, sessions: int = 200, *, token_scale: int = 16, span_ms: float = 600_000.0,
                   mean_turns: float = 2.0) -> TypedWorkload:
    """Multi-turn chat with a reasoning model; earlier reasoning is dropped from the context."""
    drafts = conversation_drafts(seed, sessions, task="reasoning", reasoning=True, token_scale=token_scale,
                                 span_ms=span_ms, mean_turns=mean_turns)
    return finish("reasoning", drafts, token_scale, "chain-of-thought chat; outputs never reused")
