"""A fixed-parameter semantic policy: recency plus a constant reuse weight per token type.

A page's weight is the smallest weight among the token types it holds (a page is reused only if
all of it matches again, so its most request-specific content bounds its reuse); its key is::

    key = anchor + HORIZON * turnover * weight          (lower leaves first)

``anchor`` is the tier's entry clock at the page's last use and ``turnover`` the pages in the tier:
a page of weight 1 outlives an unweighted one of the same age by one full turnover of the tier,
a page of weight 0 is ordered by recency alone (LRU among themselves).

The constants are set once, from published descriptions of how each type is reused, and never
fitted to a benchmark:

    type        weight   why
    system      1.0      shared by every conversation or episode of a deployment
    user        0.5      reused only if the conversation continues: about half do (LMSYS-Chat-1M
                         reports 2.0 turns per conversation on average)
    response    0.5      same: the next turn's prompt carries the reply
    tool        0.5      reused by the next step of its episode, never after it ends
    document    0.5      reused when popular; no published rate, so the neutral value
    reasoning   0.0      earlier reasoning is dropped from the next turn's context (DeepSeek
                         API guide), so it is never reused
    (untyped)   0.5      nothing known: the neutral value
"""

from __future__ import annotations

from collections.abc import Mapping

from morphcache.policies.scored import PageRecord, ScoredPolicy
from morphcache.runtime.policy import PageMeta

SEMANTIC_WEIGHTS: Mapping[str, float] = {
    "system": 1.0, "user": 0.5, "response": 0.5, "tool": 0.5, "document": 0.5, "reasoning": 0.0,
}
UNTYPED_WEIGHT = 0.5
HORIZON = 1.0


class SemanticPolicy(ScoredPolicy):
    """Recency plus fixed per-type weights (see the module docstring)."""

    name = "semantic"

    def __init__(self, weights: Mapping[str, float] | None = None, *, untyped: float = UNTYPED_WEIGHT,
                 horizon: float = HORIZON) -> None:
        super().__init__()
        self.weights = dict(SEMANTIC_WEIGHTS if weights is None else weights)
        self.untyped = untyped
        self.horizon = horizon

    def weight(self, types: frozenset[str]) -> float:
        """The page weight of a set of token types."""
        if not types:
            return self.untyped
        return min(self.weights.get(t, self.untyped) for t in types)

    def key(self, meta: PageMeta, rec: PageRecord, decision: str) -> float:
        anchor = rec.pool_anchor if decision == "pool" else rec.anchor
        return anchor + self.horizon * self.turnover(decision) * self.weight(meta.types)
