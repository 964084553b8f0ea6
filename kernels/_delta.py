"""Plain-torch building blocks of the gated-delta-rule references (no Triton).

One token's update of the states of all heads, the definition the kernels are checked against::

    S <- exp(g) * S
    S <- S + k (beta * (v - S^T k))^T
    o  = S^T q
"""

from __future__ import annotations

import torch


def delta_step(
    s: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """s [H, K, V], q/k [H, K], v [H, V], g/beta [H] -> (o [H, V], new s)."""
    s = torch.exp(g)[:, None, None] * s
    predicted = torch.einsum("hkv,hk->hv", s, k)
    s = s + k[:, :, None] * (beta[:, None] * (v - predicted))[:, None, :]
    return torch.einsum("hkv,hk->hv", s, q), s
