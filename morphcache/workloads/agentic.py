"""Agentic tool use: episodes of model actions and long tool outputs over a large shared prompt.

An episode starts from an agent deployment's system prompt (instructions and tool definitions) and
a user task; every step the model emits an action (a tool call) and the next step's prompt appends
that action and the tool's output::

    step k   prompt = [system + tools][task][action 0][tool 0] ... [action k-1][tool k-1]
             output = [action k]

What is reused, and why:

* the system prompt and tool definitions: by every episode of the deployment (structural reuse);
* everything in an episode's history: by its next step, a few seconds later (session reuse), as
  long as the agent keeps its raw history;
* nothing of an episode after it ends (its last action and the tool outputs are never read again);
* with observation masking (``keep_observations=n``), the agent replaces every tool output but the
  last ``n`` by a one-line placeholder, as SWE-agent's ``last_n_observations`` history processor
  does (n = 5 in the SWE-agent paper; its documentation notes that this breaks prompt caching):
  from the first masked output on, the history is new every step and older tool-output pages are
  never reused.

Published figures used:

* tool outputs dominate an agent's context ("observation tokens comprise the bulk of an agent's
  turn", Lindenbauer et al., "The Complexity Trap", 2025, SWE-agent on SWE-bench Verified): tool
  output lengths are log-normal, median 1,000 real tokens, sigma 1.0, capped at 16K;
* agent sessions with a 10,000-token system prompt ("Don't Break the Cache: An Evaluation of Prompt
  Caching for Long-Horizon Agentic Tasks", arXiv 2601.06007, DeepResearchBench): system prompt +
  tools log-normal, median 8,000, sigma 0.3.

Assumptions: steps per episode geometric with mean 12 (capped at 50); tool latency log-normal,
median 2 s, sigma 1.0; actions log-normal, median 120 real tokens, sigma 0.6; the task message
median 300; 4 deployments, Zipf(1) popularity; episodes start as a Poisson process.
"""

from __future__ import annotations

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


def agent_drafts(seed: int, episodes: int, *, task: str = "agent", token_scale: int = 16, start_ms: float = 0.0,
                 span_ms: float = 600_000.0, mean_steps: float = 12.0, deployments: int = 4,
                 keep_observations: int | None = None) -> list[Draft]:
    """Drafts of ``episodes`` agent episodes starting within ``[start_ms, start_ms + span_ms)``."""
    if keep_observations is not None and keep_observations < 0:
        raise ValueError(f"keep_observations must be >= 0 or None, got {keep_observations}")
    rng = random.Random(f"{task}:{seed}")
    sys_lengths = [lognormal_tokens(random.Random(f"agent-sys-len:{task}:{k}"), 8000.0, 0.3, token_scale)
                   for k in range(deployments)]
    drafts: list[Draft] = []
    for e, t in poisson_starts(rng, episodes, start_ms, span_ms):
        sid = f"{task}{seed}-e{e}"
        k = zipf_choice(rng, deployments, 1.0)
        head = Segments()
        head.add("system", content(f"agent-system:{task}:{k}", sys_lengths[k]))
        head.add("user", content(f"{sid}:task", lognormal_tokens(rng, 300.0, 0.8, token_scale)))
        steps: list[tuple[tuple[int, ...], tuple[int, ...]]] = []  # (action, tool output) per done step
        arrival = t
        for i in range(geometric(rng, mean_steps, 50)):
            prompt = head.copy()
            masked_before = len(steps) - keep_observations if keep_observations is not None else 0
            for j, (action, output) in enumerate(steps):
                prompt.add("response", action)
                prompt.add("tool", content(f"{sid}:masked{j}", 1) if j < masked_before else output)
            action = content(f"{sid}:action{i}", lognormal_tokens(rng, 120.0, 0.6, token_scale))
            out = Segments()
            out.add("response", action)
            drafts.append(Draft(arrival, f"{sid}-k{i}", sid, task, prompt, out))
            tool = content(f"{sid}:tool{i}", lognormal_tokens(rng, 1000.0, 1.0, token_scale, hi=16_384))
            steps.append((action, tool))
            arrival += 1000.0 * rng.lognormvariate(0.693, 1.0)
    return drafts


def agentic(seed: int, episodes: int = 40, *, token_scale: int = 16, span_ms: float = 600_000.0,
            mean_steps: float = 12.0, keep_observations: int | None = None) -> TypedWorkload:
    """Agentic tool use: ``episodes`` episodes over ``span_ms`` (see the module docstring)."""
    drafts = agent_drafts(seed, episodes, token_scale=token_scale, span_ms=span_ms, mean_steps=mean_steps,
                          keep_observations=keep_observations)
    masked = "raw history" if keep_observations is None else f"last {keep_observations} tool outputs kept"
    return finish("agentic", drafts, token_scale, f"agent episodes with long tool outputs ({masked})")
