"""Plain-torch building blocks of the references (no paging logic, no Triton)."""

from __future__ import annotations

import math

import torch


def attend_dense(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
    """q [Hq, D], keys/vals [J, Hkv, D] -> [Hq, D] with GQA head sharing."""
    hq, d = q.shape
    group = hq // keys.shape[1]
    k = keys.repeat_interleave(group, dim=1)  # [J, Hq, D]
    v = vals.repeat_interleave(group, dim=1)
    s = torch.einsum("hd,jhd->hj", q, k) / math.sqrt(d)
    return torch.einsum("hj,jhd->hd", torch.softmax(s, dim=-1), v)


def tail_kv(raw: torch.Tensor, page: int, t: int) -> torch.Tensor:
    """Raw KV of the tail of query position t, i.e. tokens (t // C) * C .. t of ``page``: [L, Hkv, D]."""
    c = raw.shape[1]
    return raw[page, : t - (t // c) * c + 1]
