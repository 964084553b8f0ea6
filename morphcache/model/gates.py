"""The gates of a linear-attention (gated delta rule) layer (docs/model-math.md, "Linear-attention layer").

For normed rows x [.., T, d_model], per head h::

    g[t, h]    = -exp(decay_log_rate[h]) * softplus(x[t] . w_decay[:, h] + decay_bias[h])    log-decay <= 0
    beta[t, h] = sigmoid(x[t] . w_beta[:, h])                                              write strength
    q^ = q / |q| / sqrt(D),   k^ = k / |k|                                                 unit keys
    out[t, h]  = rms_norm(o[t, h]) * silu(x[t] @ w_gate)[h]                                gated read-out

Every function here is row-wise (position-wise); only the delta rule mixes positions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from morphcache.model.config import ModelConfig
from morphcache.model.weights import frozen, linear_weight, norm_weight

DECAY_RATE_RANGE = (1.0, 16.0)  # exp(decay_log_rate) is drawn uniform in this range
DECAY_STEP_RANGE = (1e-3, 1e-1)  # softplus(decay_bias) is drawn log-uniform in this range
L2_EPS = 1e-6


def l2_normalize(x: Tensor) -> Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim."""
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + L2_EPS)


class DeltaGates(nn.Module):
    """Gate weights of one linear layer, drawn from `gen` in the order:
    w_decay, decay_log_rate, decay_bias, w_beta, w_gate, out_norm_weight.

    The initial decays span time scales from a few tokens to about a thousand: per head,
    exp(g) = exp(-rate * step) with rate in DECAY_RATE_RANGE and step in DECAY_STEP_RANGE.
    """

    def __init__(self, config: ModelConfig, gen: torch.Generator) -> None:
        super().__init__()
        c = config
        heads = c.n_kv_heads
        self.config = c
        self.w_decay = linear_weight(gen, c.d_model, heads)
        lo, hi = DECAY_RATE_RANGE
        self.decay_log_rate = frozen(torch.log(lo + (hi - lo) * torch.rand(heads, generator=gen)))
        slo, shi = math.log(DECAY_STEP_RANGE[0]), math.log(DECAY_STEP_RANGE[1])
        step = torch.exp(slo + (shi - slo) * torch.rand(heads, generator=gen))
        self.decay_bias = frozen(step + torch.log(-torch.expm1(-step)))  # softplus^-1(step)
        self.w_beta = linear_weight(gen, c.d_model, heads)
        self.w_gate = linear_weight(gen, c.d_model, heads * c.head_dim)
        self.out_norm_weight = norm_weight(gen, c.head_dim)

    def decay(self, x_normed: Tensor) -> Tensor:
        """Log-decays g [.., T, H] (<= 0) of normed rows [.., T, d_model]."""
        step = torch.nn.functional.softplus(x_normed @ self.w_decay + self.decay_bias)
        return -torch.exp(self.decay_log_rate) * step

    def beta(self, x_normed: Tensor) -> Tensor:
        """Write strengths beta [.., T, H] in (0, 1)."""
        return torch.sigmoid(x_normed @ self.w_beta)

    def rule_inputs(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """The delta rule's query and key: q / |q| / sqrt(D) and k / |k| ([.., T, H, D] each)."""
        return l2_normalize(q) * self.config.scale, l2_normalize(k)

    def output(self, o: Tensor, x_normed: Tensor) -> Tensor:
        """Gated read-out [.., T, H, D] of the rule's output o [.., T, H, D]."""
        gate = torch.nn.functional.silu(x_normed @ self.w_gate).reshape(o.shape)
        normed = o * torch.rsqrt(o.pow(2).mean(dim=-1, keepdim=True) + self.config.norm_eps)
        return normed * self.out_norm_weight * gate
