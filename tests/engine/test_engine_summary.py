"""The simulate report's hit rates on a run whose figures are known by construction.

A prompt of three whole pages and five tokens is served (a miss), its three cached pages are moved to
the host, and the prompt plus two tokens is served again: the second lookup's nominal hit is the three
pages, none readable on the GPU at lookup time, all read after recovery.  So, over both prompts, the
nominal hit rate is 3C / prompt tokens, the effective one (readable at lookup, before recovery) is 0
and the reuse rate after recovery is 3C / prompt tokens: a report that took nominal hits for readable
ones would show the effective rate equal to the nominal one.
"""

from __future__ import annotations

import torch
from eng_helpers import TOL, C, make_engine

from morphcache.engine.replay import ReplayResult
from morphcache.engine.summary import summarize
from morphcache.model import HybridModel


def test_effective_hit_rate_counts_only_what_was_readable_at_lookup(model: HybridModel) -> None:
    engine = make_engine(model, None, ops="reference")
    try:
        prompt = [int(t) for t in torch.randint(0, 256, (3 * C + 5,), generator=torch.Generator().manual_seed(4))]
        first = engine.serve(prompt)
        for pid in first.pages[:3]:
            engine.manager.offload(pid, "host")
        second = engine.serve(prompt + [1, 2])
        assert engine.golden_diff(second) <= TOL
        summary = summarize(engine, ReplayResult((first.report, second.report), 0, 0.0), "constructed")
    finally:
        engine.close()
    prompt_tokens = len(prompt) + len(prompt) + 2
    assert summary.prompt_tokens == prompt_tokens
    assert summary.nominal_hit_rate == 3 * C / prompt_tokens
    assert summary.effective_hit_rate == 0.0
    assert summary.reuse_rate == 3 * C / prompt_tokens
    assert summary.gap_tokens == 3 * C and dict(summary.gap_by_object) == {"tier": 3 * C}
    reported = summary.to_dict()
    assert (reported["nominal_hit_rate"], reported["effective_hit_rate"]) == (3 * C / prompt_tokens, 0.0)
