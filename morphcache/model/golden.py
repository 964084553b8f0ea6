"""The golden forward: full recomputation over the whole sequence, no cache.

Written directly from docs/model-math.md. For every query position t the set of visible keys is
built exactly as the contract states (pages.py gives the ranges), as one row of a dense mask over

    keys = [ ck[0] .. ck[nb-1] | k[0] .. k[T-1] ]        nb = T // C complete pages
             compressed entries   raw positions

and one softmax is taken over that row (attention.py). Window layers use only the raw part.
Linear layers run the gated delta rule token by token from a zero state (linear.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from morphcache.model.attention import masked_attention
from morphcache.model.compression import compress_pages
from morphcache.model.config import LayerKind, ModelConfig
from morphcache.model.linear import golden_linear
from morphcache.model.pages import complete_pages, compressed_pages, tail_positions, window_positions
from morphcache.model.routing import indexer_query, page_scores, select_pages

if TYPE_CHECKING:
    from morphcache.model.hybrid import HybridModel

QUERY_BLOCK = 512  # query rows per dense mask, bounds memory on long sequences


def routed_pages(qi: Tensor, ik: Tensor, t: int, config: ModelConfig) -> list[int]:
    """Pages a sparse-layer query at t attends: the top-k of pages 0..page_of(t)-1 by qi . ik.

    qi: [D], the query's indexer query; ik: [n, D] indexer keys of (at least) those pages.
    """
    candidates = compressed_pages(t, config.page_size)
    if len(candidates) == 0:
        return []
    picked = select_pages(page_scores(qi, ik[candidates.start : candidates.stop]), config.top_k)
    return [b for b in picked.tolist() if b >= 0]


def golden_attention(
    kind: LayerKind, q: Tensor, k: Tensor, v: Tensor, pool_bias: Tensor | None, config: ModelConfig
) -> Tensor:
    """One layer's attention output [T, Hq, D] for q [T, Hq, D], k, v [T, Hkv, D] at positions 0..T-1.

    pool_bias [C, Hkv, D] is required for compressed and sparse layers, ignored for window layers.
    """
    if kind.recurrent:
        raise ValueError(f"a {kind.value} layer has no attention (see linear.golden_linear)")
    n_tokens = q.shape[0]
    if kind is LayerKind.WINDOW:
        keys, vals, n_comp = k, v, 0
        qi = ik = None
    else:
        if pool_bias is None:
            raise ValueError(f"a {kind.value} layer needs pool_bias")
        n_comp = complete_pages(n_tokens, config.page_size)
        comp = compress_pages(k[: n_comp * config.page_size], v[: n_comp * config.page_size], pool_bias)
        keys, vals = torch.cat([comp.ck, k]), torch.cat([comp.cv, v])
        qi, ik = indexer_query(q), comp.ik

    out = torch.empty_like(q)
    for lo in range(0, n_tokens, QUERY_BLOCK):
        hi = min(lo + QUERY_BLOCK, n_tokens)
        visible = torch.zeros(hi - lo, keys.shape[0], dtype=torch.bool, device=q.device)
        for t in range(lo, hi):
            row = visible[t - lo]
            if kind is LayerKind.WINDOW:
                w = window_positions(t, config.window)
                row[w.start : w.stop] = True
                continue
            if kind is LayerKind.SPARSE:
                assert qi is not None and ik is not None
                pages: Sequence[int] = routed_pages(qi[t], ik, t, config)
            else:
                pages = compressed_pages(t, config.page_size)
            for b in pages:
                row[b] = True
            tail = tail_positions(t, config.page_size)
            row[n_comp + tail.start : n_comp + tail.stop] = True
        out[lo:hi] = masked_attention(q[lo:hi], keys, vals, visible, config.scale)
    return out


def golden_logits(model: HybridModel, tokens: Sequence[int] | Tensor) -> Tensor:
    """Logits [T, vocab] of the model over tokens [T], recomputed from scratch (no cache).

    Row t is the next-token distribution after tokens[0..t]; it depends only on tokens[0..t].
    """
    with torch.no_grad():
        x = model.embed(tokens)
        for layer in model.layers:
            x_normed = layer.attn_norm(x)
            if layer.kind.recurrent:
                mixed = golden_linear(layer, x_normed)
            else:
                q, k, v = layer.qkv(x_normed)
                bias = layer.pool_bias if layer.kind.compresses else None
                mixed = golden_attention(layer.kind, q, k, v, bias, model.config)
            x = layer.residual_mlp(x + layer.out_proj(mixed))
        return model.head(x)
