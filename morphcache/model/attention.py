"""Grouped-query softmax attention over an explicit set of visible keys."""

from __future__ import annotations

import torch
from torch import Tensor


def masked_attention(q: Tensor, k: Tensor, v: Tensor, visible: Tensor, scale: float) -> Tensor:
    """out[t, h] = softmax_j( scale * q[t, h] . k[j, g] ) @ v[j, g] over j with visible[t, j].

    q: [Tq, Hq, D]; k, v: [Nk, Hkv, D]; visible: bool [Tq, Nk]; query head h reads kv head
    g = h // (Hq // Hkv). Every query must see at least one key. Returns [Tq, Hq, D].
    """
    n_q_heads, n_kv_heads = q.shape[1], k.shape[1]
    if n_q_heads % n_kv_heads != 0:
        raise ValueError(f"Hq={n_q_heads} is not a multiple of Hkv={n_kv_heads}")
    if visible.shape != (q.shape[0], k.shape[0]):
        raise ValueError(f"visible must be [{q.shape[0]}, {k.shape[0]}], got {tuple(visible.shape)}")
    if q.shape[0] and not bool(visible.any(dim=1).all()):
        raise ValueError("every query must see at least one key")
    group = n_q_heads // n_kv_heads
    k_h = k.repeat_interleave(group, dim=1)  # [Nk, Hq, D]
    v_h = v.repeat_interleave(group, dim=1)
    logits = torch.einsum("thd,nhd->htn", q, k_h) * scale
    logits = logits.masked_fill(~visible.unsqueeze(0), float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.einsum("htn,nhd->thd", probs, v_h)
