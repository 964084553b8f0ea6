"""Eviction policies behind the runtime's policy interface (``morphcache.runtime.policy``).

- ``LRUPolicy`` (the runtime's default, re-exported): least recently used per tier.
- ``FlopAwarePolicy`` ("flop"): recency plus FLOPs saved per byte, after Marconi (MLSys 2025).
- ``SemanticPolicy`` ("semantic"): recency plus fixed, documented per-token-type weights.
- ``SAECachePolicy`` ("saecache"): task queues, token-type weights learned from eviction feedback,
  every parameter adapted online, after SAECache (arXiv 2605.18825).

Importing this package registers the three names with ``morphcache.runtime.policy.make_policy``.
``CostModel`` prices a miss and a tier move (shared with the eviction benchmark).
"""

from morphcache.policies.cost import DEFAULT_COST, CostModel
from morphcache.policies.flop import FlopAwarePolicy
from morphcache.policies.saecache import SAECachePolicy
from morphcache.policies.scored import ScoredPolicy
from morphcache.policies.semantic import SEMANTIC_WEIGHTS, SemanticPolicy
from morphcache.runtime.policy import EvictionPolicy, LRUPolicy, PageMeta, make_policy, register_policy

register_policy("flop", FlopAwarePolicy)
register_policy("semantic", SemanticPolicy)
register_policy("saecache", SAECachePolicy)

__all__ = [
    "DEFAULT_COST",
    "SEMANTIC_WEIGHTS",
    "CostModel",
    "EvictionPolicy",
    "FlopAwarePolicy",
    "LRUPolicy",
    "PageMeta",
    "SAECachePolicy",
    "ScoredPolicy",
    "SemanticPolicy",
    "make_policy",
]
