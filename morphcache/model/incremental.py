"""Plain-torch incremental reference: the model run chunk by chunk over a minimal per-layer state.

It uses the same position-wise blocks as the golden forward and keeps, per layer, only what later
queries can still see (no paging, plain tensors). After `length` tokens (C = 4, W = 6, length 10):

::

     positions       0 1 2 3 | 4 5 6 7 | 8 9
     compressed/sparse layer:
       pages         [c0]      [c1]                one compressed entry per complete page
       raw                               8 9       raw_start = (length // C) * C = 8
     window layer:
       raw                         5 6 7 | 8 9     raw_start = max(0, length - (W - 1)) = 5

A new chunk appends its raw k/v, compresses the pages it completes (before attending: a query in
a later page of the same chunk sees them), attends, then drops raw rows no later query can see.
Equality with the golden forward for any chunking shows the blocks compose causally and that this
state suffices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from morphcache.model.attention import masked_attention
from morphcache.model.compression import (
    CompressedPages,
    compress_pages,
    concat_compressed,
    empty_compressed,
)
from morphcache.model.config import LayerKind, ModelConfig
from morphcache.model.golden import routed_pages
from morphcache.model.hybrid import HybridModel
from morphcache.model.layers import HybridLayer
from morphcache.model.pages import complete_pages, compressed_pages, tail_positions, window_positions
from morphcache.model.routing import indexer_query


@dataclass
class LayerState:
    """What one layer keeps between chunks.

    raw_k, raw_v: [n, Hkv, D], raw k/v of positions raw_start .. raw_start + n - 1.
    pages: compressed entries of pages 0 .. n_pages-1 (always empty for window layers).
    """

    kind: LayerKind
    raw_start: int
    raw_k: Tensor
    raw_v: Tensor
    pages: CompressedPages

    @property
    def n_pages(self) -> int:
        return int(self.pages.ck.shape[0])

    @property
    def raw_end(self) -> int:
        """One past the last raw position held."""
        return self.raw_start + int(self.raw_k.shape[0])


def _empty_state(kind: LayerKind, config: ModelConfig, device: torch.device) -> LayerState:
    raw = torch.zeros(0, config.n_kv_heads, config.head_dim, device=device)
    return LayerState(kind, 0, raw, raw.clone(), empty_compressed(config.n_kv_heads, config.head_dim, device))


class IncrementalState:
    """A sequence being fed to the model chunk by chunk; `extend` returns the new rows' logits."""

    def __init__(self, model: HybridModel) -> None:
        self.model = model
        self.config = model.config
        self.length = 0
        self.layers = [_empty_state(kind, self.config, model.device) for kind in self.config.layer_kinds]

    def extend(self, tokens: Sequence[int] | Tensor) -> Tensor:
        """Append tokens [n] at positions length .. length+n-1; return their logits [n, vocab]."""
        model = self.model
        tok = model.token_tensor(tokens)
        with torch.no_grad():
            x = model.embed(tok)
            for layer, state in zip(model.layers, self.layers, strict=True):
                attn = self._layer_attention(layer, state, layer.attn_norm(x))
                x = layer.residual_mlp(x + layer.out_proj(attn))
            self.length += int(tok.shape[0])
            return model.head(x)

    def _layer_attention(self, layer: HybridLayer, state: LayerState, x_normed: Tensor) -> Tensor:
        """Attention output [n, Hq, D] of the chunk's rows; updates state to cover the chunk."""
        c = self.config
        t0, n = self.length, x_normed.shape[0]
        t1 = t0 + n
        q, k, v = layer.qkv(x_normed)
        if state.raw_end != t0:
            raise RuntimeError(f"layer state ends at {state.raw_end}, sequence at {t0}")
        state.raw_k = torch.cat([state.raw_k, k])
        state.raw_v = torch.cat([state.raw_v, v])

        if layer.kind.compresses:
            done, target = state.n_pages, complete_pages(t1, c.page_size)
            if target > done:
                lo, hi = done * c.page_size - state.raw_start, target * c.page_size - state.raw_start
                fresh = compress_pages(state.raw_k[lo:hi], state.raw_v[lo:hi], layer.pool_bias)
                state.pages = concat_compressed(state.pages, fresh)
            keys = torch.cat([state.pages.ck, state.raw_k])
            vals = torch.cat([state.pages.cv, state.raw_v])
            n_comp = state.n_pages
            qi = indexer_query(q)
        else:
            keys, vals, n_comp = state.raw_k, state.raw_v, 0

        visible = torch.zeros(n, keys.shape[0], dtype=torch.bool, device=q.device)
        for i, t in enumerate(range(t0, t1)):
            if layer.kind is LayerKind.WINDOW:
                raw = window_positions(t, c.window)
            else:
                raw = tail_positions(t, c.page_size)
                if layer.kind is LayerKind.SPARSE:
                    pages: Sequence[int] = routed_pages(qi[i], state.pages.ik, t, c)
                else:
                    pages = compressed_pages(t, c.page_size)
                for b in pages:
                    visible[i, b] = True
            if raw.start < state.raw_start:
                raise RuntimeError(f"position {raw.start} was dropped from the {layer.kind.value} state")
            visible[i, n_comp + raw.start - state.raw_start : n_comp + raw.stop - state.raw_start] = True
        out = masked_attention(q, keys, vals, visible, c.scale)

        keep_from = (
            max(0, t1 - (c.window - 1))
            if layer.kind is LayerKind.WINDOW
            else complete_pages(t1, c.page_size) * c.page_size
        )
        drop = keep_from - state.raw_start
        state.raw_k, state.raw_v, state.raw_start = state.raw_k[drop:], state.raw_v[drop:], keep_from
        return out


def chunk_sizes(total: int, chunks: int | Sequence[int]) -> list[int]:
    """Chunk lengths for `total` tokens: a fixed size (last chunk shorter), or explicit sizes."""
    if isinstance(chunks, int):
        if chunks < 1:
            raise ValueError(f"chunk size must be >= 1, got {chunks}")
        return [min(chunks, total - lo) for lo in range(0, total, chunks)]
    sizes = list(chunks)
    if any(s < 0 for s in sizes) or sum(sizes) != total:
        raise ValueError(f"chunk sizes {sizes} do not split {total} tokens")
    return sizes


def incremental_logits(
    model: HybridModel, tokens: Sequence[int] | Tensor, chunks: int | Sequence[int]
) -> Tensor:
    """Logits [T, vocab] computed chunk by chunk through an IncrementalState.

    chunks: a chunk size, or the explicit list of chunk lengths (summing to T).
    """
    tok = model.token_tensor(tokens)
    state = IncrementalState(model)
    rows: list[Tensor] = []
    lo = 0
    for size in chunk_sizes(int(tok.shape[0]), chunks):
        rows.append(state.extend(tok[lo : lo + size]))
        lo += size
    if not rows:
        return torch.zeros(0, model.config.vocab_size, device=model.device)
    return torch.cat(rows)
