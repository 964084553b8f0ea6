"""One pre-norm residual block of the hybrid model and its per-token building blocks.

::

    x ──┬──────────────────────────────────────────────(+)──┬──────────────────────(+)── x'
        └─ attn_norm ─ qkv ─ q,k,v ─ attention(kind) ─ out_proj   └─ mlp_norm ─ mlp ─┘

Every building block here is row-wise (position-wise): row t of its output depends only on row t
of its input. Only the attention (golden.py, incremental.py, or the cache kernels) mixes positions.
A linear layer (kind LINEAR) has the same shape; its "attention" is the gated delta rule over
q, k, v and its gates (gates.py), read out through the gated norm.

The blocks take any leading batch dims ([.., T, d_model]); the reference forwards pass [T, d_model].
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from morphcache.model.config import LayerKind, ModelConfig
from morphcache.model.gates import DeltaGates
from morphcache.model.weights import gaussian, linear_weight, norm_weight


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm over the last dim: x / sqrt(mean(x^2) + eps) * weight."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class HybridLayer(nn.Module):
    """Weights and position-wise blocks of one layer (attention kind `kind`).

    Weights are drawn from `gen` in this order: attn_norm, wq, wk, wv, wo, pool_bias (only for
    compressed/sparse layers) or the delta gates (only for linear layers), mlp_norm, w_up, w_down.
    """

    def __init__(self, config: ModelConfig, kind: LayerKind, gen: torch.Generator) -> None:
        super().__init__()
        c = config
        self.config = c
        self.kind = kind
        self.attn_norm_weight = norm_weight(gen, c.d_model)
        self.wq = linear_weight(gen, c.d_model, c.n_q_heads * c.head_dim)
        self.wk = linear_weight(gen, c.d_model, c.n_kv_heads * c.head_dim)
        self.wv = linear_weight(gen, c.d_model, c.n_kv_heads * c.head_dim)
        self.wo = linear_weight(gen, c.n_q_heads * c.head_dim, c.d_model)
        self._pool_bias: nn.Parameter | None = None
        if kind.compresses:
            self._pool_bias = gaussian(gen, c.page_size, c.n_kv_heads, c.head_dim)
        self._delta: DeltaGates | None = DeltaGates(c, gen) if kind.recurrent else None
        self.mlp_norm_weight = norm_weight(gen, c.d_model)
        self.w_up = linear_weight(gen, c.d_model, c.mlp_hidden)
        self.w_down = linear_weight(gen, c.mlp_hidden, c.d_model)

    @property
    def pool_bias(self) -> Tensor:
        """The learned pooling bias [C, Hkv, D] of a compressed or sparse layer."""
        if self._pool_bias is None:
            raise ValueError(f"a {self.kind.value} layer has no pool_bias")
        return self._pool_bias

    @property
    def delta(self) -> DeltaGates:
        """The gates of a linear layer (gated delta rule)."""
        if self._delta is None:
            raise ValueError(f"a {self.kind.value} layer has no delta gates")
        return self._delta

    def attn_norm(self, x: Tensor) -> Tensor:
        """Pre-attention RMSNorm of the residual stream x [T, d_model]."""
        return rms_norm(x, self.attn_norm_weight, self.config.norm_eps)

    def qkv(self, x_normed: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Projections of normed rows [T, d_model] -> q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D]."""
        c = self.config
        lead = x_normed.shape[:-1]
        q = (x_normed @ self.wq).reshape(*lead, c.n_q_heads, c.head_dim)
        k = (x_normed @ self.wk).reshape(*lead, c.n_kv_heads, c.head_dim)
        v = (x_normed @ self.wv).reshape(*lead, c.n_kv_heads, c.head_dim)
        return q, k, v

    def out_proj(self, attn: Tensor) -> Tensor:
        """Attention output [T, Hq, D] -> residual update [T, d_model]."""
        return attn.flatten(-2) @ self.wo

    def mlp_norm(self, x: Tensor) -> Tensor:
        """Pre-MLP RMSNorm of the residual stream x [T, d_model]."""
        return rms_norm(x, self.mlp_norm_weight, self.config.norm_eps)

    def mlp(self, x_normed: Tensor) -> Tensor:
        """SiLU MLP: silu(x @ w_up) @ w_down, [T, d_model] -> [T, d_model]."""
        return torch.nn.functional.silu(x_normed @ self.w_up) @ self.w_down

    def residual_mlp(self, x: Tensor) -> Tensor:
        """x + mlp(mlp_norm(x)): the second half of the block."""
        return x + self.mlp(self.mlp_norm(x))
