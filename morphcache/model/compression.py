"""Compression of complete pages into one entry each (docs/model-math.md, "Compression").

For page b with raw keys k[b*C + i, g, d] and values v[b*C + i, g, d], i in 0..C-1::

    w[i, g, d]  = softmax_i( k[b*C+i, g, d] + pool_bias[i, g, d] )
    ck[b, g, d] = sum_i w[i, g, d] * k[b*C+i, g, d]
    cv[b, g, d] = sum_i w[i, g, d] * v[b*C+i, g, d]
    ik[b, d]    = mean_g ck[b, g, d]            (indexer key)
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class CompressedPages(NamedTuple):
    """Compressed entries of consecutive complete pages of one layer."""

    ck: Tensor  # [n_pages, Hkv, D] compressed keys
    cv: Tensor  # [n_pages, Hkv, D] compressed values
    ik: Tensor  # [n_pages, D] indexer keys


def compress_pages(k: Tensor, v: Tensor, pool_bias: Tensor) -> CompressedPages:
    """Compress whole pages of raw k/v.

    k, v: [n_pages * C, Hkv, D], the raw keys/values of n_pages consecutive complete pages,
    starting at a page boundary. pool_bias: [C, Hkv, D]. Returns ck, cv [n_pages, Hkv, D] and
    ik [n_pages, D]. Each page is compressed independently of the others.
    """
    page_size, n_kv, head_dim = pool_bias.shape
    if k.shape != v.shape or k.dim() != 3 or k.shape[1:] != (n_kv, head_dim):
        raise ValueError(
            f"k/v must both be [n*C, {n_kv}, {head_dim}], got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if k.shape[0] % page_size != 0:
        raise ValueError(f"k/v length {k.shape[0]} is not a whole number of pages of {page_size}")
    n_pages = k.shape[0] // page_size
    kp = k.reshape(n_pages, page_size, n_kv, head_dim)
    vp = v.reshape(n_pages, page_size, n_kv, head_dim)
    w = torch.softmax(kp + pool_bias.unsqueeze(0), dim=1)
    ck = (w * kp).sum(dim=1)
    cv = (w * vp).sum(dim=1)
    ik = ck.mean(dim=1)
    return CompressedPages(ck, cv, ik)


def empty_compressed(n_kv_heads: int, head_dim: int, device: torch.device | None = None) -> CompressedPages:
    """Zero compressed pages (the state of a layer before its first page completes)."""
    return CompressedPages(
        torch.zeros(0, n_kv_heads, head_dim, device=device),
        torch.zeros(0, n_kv_heads, head_dim, device=device),
        torch.zeros(0, head_dim, device=device),
    )


def concat_compressed(a: CompressedPages, b: CompressedPages) -> CompressedPages:
    """Pages of a followed by pages of b."""
    return CompressedPages(
        torch.cat([a.ck, b.ck]), torch.cat([a.cv, b.cv]), torch.cat([a.ik, b.ik])
    )
