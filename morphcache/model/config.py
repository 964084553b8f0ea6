"""The reference model's configuration (defaults = docs/model-math.md, "Layer stack")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class LayerKind(str, Enum):
    """How one layer's attention sees the past (docs/model-math.md)."""

    COMPRESSED = "compressed"  # compressed entries of earlier pages + raw tail of own page
    SPARSE = "sparse"  # like COMPRESSED, but only the top-k routed earlier pages
    WINDOW = "window"  # raw k/v of the last W positions
    LINEAR = "linear"  # gated delta rule: one fixed-size recurrent state, no per-token KV

    @property
    def compresses(self) -> bool:
        """True for the kinds that keep a compressed entry per complete page."""
        return self in (LayerKind.COMPRESSED, LayerKind.SPARSE)

    @property
    def recurrent(self) -> bool:
        """True for the kinds whose history is a recurrent state (it cannot be rolled back)."""
        return self is LayerKind.LINEAR


DEFAULT_LAYER_KINDS: tuple[LayerKind, ...] = (
    LayerKind.COMPRESSED,
    LayerKind.WINDOW,
    LayerKind.SPARSE,
    LayerKind.COMPRESSED,
    LayerKind.WINDOW,
    LayerKind.SPARSE,
)


@dataclass(frozen=True)
class ModelConfig:
    """Shape and attention parameters of the hybrid-attention reference model.

    Weight shapes depend only on vocab_size, d_model, the head counts, head_dim, page_size,
    mlp_hidden and layer_kinds; window and top_k change the attention pattern only, so two
    configs that differ only there yield identical weights from the same seed.
    """

    vocab_size: int = 256
    d_model: int = 64
    n_q_heads: int = 4  # Hq
    n_kv_heads: int = 2  # Hkv
    head_dim: int = 16  # D
    page_size: int = 16  # C, tokens per page (block)
    window: int = 48  # W, tokens seen by a sliding-window query, itself included
    top_k: int = 2  # pages routed to by a sparse-routing query
    mlp_hidden: int = 128
    layer_kinds: tuple[LayerKind, ...] = DEFAULT_LAYER_KINDS
    norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        positive = {
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "n_q_heads": self.n_q_heads,
            "n_kv_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "page_size": self.page_size,
            "window": self.window,
            "top_k": self.top_k,
            "mlp_hidden": self.mlp_hidden,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"ModelConfig.{name} must be >= 1, got {value}")
        if self.n_q_heads % self.n_kv_heads != 0:
            raise ValueError(
                f"n_q_heads ({self.n_q_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )
        if not self.layer_kinds:
            raise ValueError("layer_kinds must name at least one layer")
        for kind in self.layer_kinds:
            if not isinstance(kind, LayerKind):
                raise TypeError(f"layer_kinds entries must be LayerKind, got {kind!r}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps}")
        if LayerKind.LINEAR in self.layer_kinds and self.n_q_heads != self.n_kv_heads:
            raise ValueError(
                f"linear layers keep one state per head: n_q_heads ({self.n_q_heads}) must equal "
                f"n_kv_heads ({self.n_kv_heads})"
            )

    @property
    def linear_layers(self) -> tuple[int, ...]:
        """Indices of the linear-attention (recurrent) layers."""
        return tuple(i for i, kind in enumerate(self.layer_kinds) if kind.recurrent)

    @property
    def n_layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def group_size(self) -> int:
        """Query heads per kv head: query head h reads kv head h // group_size."""
        return self.n_q_heads // self.n_kv_heads

    @property
    def scale(self) -> float:
        """Attention logit scale s = 1 / sqrt(D)."""
        return 1.0 / math.sqrt(self.head_dim)


FULL_CONTEXT = 1 << 20  # a window longer than any sequence served: window layers see every earlier token

GDN_HYBRID_LAYER_KINDS: tuple[LayerKind, ...] = (
    LayerKind.LINEAR,
    LayerKind.LINEAR,
    LayerKind.LINEAR,
    LayerKind.WINDOW,
    LayerKind.LINEAR,
    LayerKind.LINEAR,
    LayerKind.LINEAR,
    LayerKind.WINDOW,
)

MODEL_CONFIGS: dict[str, ModelConfig] = {
    # the compressed / sliding-window / sparse-routing hybrid (docs/model-math.md, "Layer stack")
    "hybrid": ModelConfig(),
    # 3 linear : 1 full attention; the attention layers keep exact KV of every position
    # (a window layer whose window exceeds any context), docs/model-math.md, "GDN hybrid"
    "gdn-hybrid": ModelConfig(
        n_q_heads=4, n_kv_heads=4, window=FULL_CONTEXT, layer_kinds=GDN_HYBRID_LAYER_KINDS
    ),
}


def model_config(name: str) -> ModelConfig:
    """The named configuration ("hybrid" or "gdn-hybrid"); ValueError names the known ones."""
    try:
        return MODEL_CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}: expected one of {', '.join(sorted(MODEL_CONFIGS))}") from None
