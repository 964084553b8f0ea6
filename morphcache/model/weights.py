"""Seeded, frozen weight tensors (all drawn from one torch.Generator, fp32)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def frozen(t: Tensor) -> nn.Parameter:
    """Wrap t as a parameter that never records gradients (the model is inference-only)."""
    return nn.Parameter(t, requires_grad=False)


def linear_weight(gen: torch.Generator, fan_in: int, fan_out: int) -> nn.Parameter:
    """A [fan_in, fan_out] matrix with entries N(0, 1) / sqrt(fan_in) (used as x @ w)."""
    return frozen(torch.randn(fan_in, fan_out, generator=gen) / fan_in**0.5)


def norm_weight(gen: torch.Generator, dim: int) -> nn.Parameter:
    """An RMSNorm gain [dim] with entries 1 + 0.1 * N(0, 1)."""
    return frozen(1.0 + 0.1 * torch.randn(dim, generator=gen))


def gaussian(gen: torch.Generator, *shape: int) -> nn.Parameter:
    """A tensor of the given shape with entries N(0, 1)."""
    return frozen(torch.randn(*shape, generator=gen))
