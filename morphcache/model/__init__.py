"""The hybrid-attention reference model (docs/model-math.md).

- HybridModel(config, seed): seeded fp32 weights and position-wise blocks (embed, per-layer
  attn_norm / qkv / pool_bias / out_proj / mlp_norm / mlp, head).
- golden_logits: full recomputation, the baseline every cached path must match.
- IncrementalState / incremental_logits: plain-torch chunked reference over a minimal state.
"""

from morphcache.model.attention import masked_attention
from morphcache.model.compression import CompressedPages, compress_pages
from morphcache.model.config import DEFAULT_LAYER_KINDS, LayerKind, ModelConfig
from morphcache.model.golden import golden_attention, golden_logits, routed_pages
from morphcache.model.hybrid import HybridModel
from morphcache.model.incremental import IncrementalState, LayerState, incremental_logits
from morphcache.model.layers import HybridLayer, rms_norm
from morphcache.model.pages import (
    complete_pages,
    compressed_pages,
    page_of,
    tail_positions,
    window_positions,
)
from morphcache.model.routing import indexer_query, page_scores, select_pages

__all__ = [
    "DEFAULT_LAYER_KINDS",
    "CompressedPages",
    "HybridLayer",
    "HybridModel",
    "IncrementalState",
    "LayerKind",
    "LayerState",
    "ModelConfig",
    "complete_pages",
    "compress_pages",
    "compressed_pages",
    "golden_attention",
    "golden_logits",
    "incremental_logits",
    "indexer_query",
    "masked_attention",
    "page_of",
    "page_scores",
    "rms_norm",
    "routed_pages",
    "select_pages",
    "tail_positions",
    "window_positions",
]
