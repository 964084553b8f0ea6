"""The hybrid-attention reference model (docs/model-math.md).

- HybridModel(config, seed): seeded fp32 weights and position-wise blocks (embed, per-layer
  attn_norm / qkv / pool_bias / out_proj / mlp_norm / mlp, head).
- golden_logits: full recomputation, the baseline every cached path must match.
- IncrementalState / incremental_logits: plain-torch chunked reference over a minimal state; for
  linear layers it also checkpoints, drops and replays recurrent states (Tail-Replay).
- model_config("hybrid" | "gdn-hybrid"): the two configurations; load_trained(name): trained weights.
- delta_rule_recurrent / delta_rule_chunked: the gated delta rule of linear layers.
- parallel_logits: batched, differentiable forward (training, fast evaluation).
"""

from morphcache.model.attention import masked_attention
from morphcache.model.compression import CompressedPages, compress_pages
from morphcache.model.config import (
    DEFAULT_LAYER_KINDS,
    FULL_CONTEXT,
    GDN_HYBRID_LAYER_KINDS,
    MODEL_CONFIGS,
    LayerKind,
    ModelConfig,
    model_config,
)
from morphcache.model.delta import delta_rule_chunked, delta_rule_recurrent
from morphcache.model.gates import DeltaGates
from morphcache.model.golden import golden_attention, golden_logits, routed_pages
from morphcache.model.hybrid import HybridModel
from morphcache.model.incremental import IncrementalState, LayerState, RecurrentCheckpoint, incremental_logits
from morphcache.model.layers import HybridLayer, rms_norm
from morphcache.model.pages import (
    complete_pages,
    compressed_pages,
    page_of,
    tail_positions,
    window_positions,
)
from morphcache.model.parallel import parallel_logits
from morphcache.model.routing import indexer_query, page_scores, select_pages
from morphcache.model.trained import load_trained, trained_weights

__all__ = [
    "DEFAULT_LAYER_KINDS",
    "FULL_CONTEXT",
    "GDN_HYBRID_LAYER_KINDS",
    "MODEL_CONFIGS",
    "DeltaGates",
    "RecurrentCheckpoint",
    "delta_rule_chunked",
    "delta_rule_recurrent",
    "load_trained",
    "model_config",
    "parallel_logits",
    "trained_weights",
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
