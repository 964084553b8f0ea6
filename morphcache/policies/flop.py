"""A FLOP-aware policy after Marconi (Pan et al., "Marconi: Prefix Caching for the Era of Hybrid
LLMs", MLSys 2025).

Marconi scores each cache entry by recency and by *FLOP efficiency*, the compute a hit on the
entry saves per byte the entry holds, ``S = recency + alpha * flop_efficiency`` with both terms
normalised over the candidates, and evicts the lowest score.  Its observation: with hybrid models
the entries differ widely in FLOPs saved per byte (long prefixes save quadratic attention work;
recurrent-state checkpoints are large but cheap to skip), so recency alone evicts the wrong ones.

Here an entry is a page.  The compute a hit on page d saves is the prefill of its tokens at their
positions (``CostModel.prefill_seconds``, which grows with position); the bytes are the page's
size on its tier.  Normalised recency over the tier is the page's age over the tier's turnover, so
ordering by ``S`` is ordering by the static key::

    key = anchor + ALPHA * turnover * efficiency / max_efficiency       (lower leaves first)

(``anchor``: the tier's entry clock at the page's last use; ``turnover``: pages in the tier).
What differs from the paper: Marconi chooses ``alpha`` per workload by replaying recent requests
under a grid of values; this policy keeps ``ALPHA`` = 1 (recency and efficiency weigh the same
across their ranges), and it leaves admission to the runtime (Marconi also declines to cache
entries it predicts will not be reused).  ``max_efficiency`` is the largest seen so far.
"""

from __future__ import annotations

from morphcache.policies.cost import DEFAULT_COST, CostModel
from morphcache.policies.scored import PageRecord, ScoredPolicy
from morphcache.runtime.policy import PageMeta

ALPHA = 1.0


class FlopAwarePolicy(ScoredPolicy):
    """Recency plus FLOPs saved per byte (see the module docstring).

    ``token_scale``: real tokens per runtime token (a scaled-down replay); ``cost``: the prefill
    cost model whose seconds stand for FLOPs.
    """

    name = "flop"

    def __init__(self, *, alpha: float = ALPHA, cost: CostModel = DEFAULT_COST, token_scale: int = 1) -> None:
        super().__init__()
        self.alpha = alpha
        self.cost = cost
        self.token_scale = token_scale
        self.page_tokens = 1
        self.max_efficiency = 0.0

    def efficiency(self, meta: PageMeta) -> float:
        """Prefill seconds a hit on the page saves, per byte it holds."""
        if meta.tokens > self.page_tokens:
            self.page_tokens = meta.tokens
        start = meta.depth * self.page_tokens * self.token_scale
        saved = self.cost.prefill_seconds(start, start + max(meta.tokens, 1) * self.token_scale)
        eff = saved / max(meta.bytes, 1)
        if eff > self.max_efficiency:
            self.max_efficiency = eff
        return eff

    def key(self, meta: PageMeta, rec: PageRecord, decision: str) -> float:
        anchor = rec.pool_anchor if decision == "pool" else rec.anchor
        eff = self.efficiency(meta)
        return anchor + self.alpha * self.turnover(decision) * eff / (self.max_efficiency or 1.0)
