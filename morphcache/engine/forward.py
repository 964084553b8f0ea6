"""The cached forward: a chunk of new tokens through the model, attention only through the kernels.

For a chunk at positions ``start .. end-1`` of a sequence whose pages sit in GPU slots
``slots[b]`` (block b covers positions b*C .. b*C+C-1), layer by layer::

    x ── attn_norm ── qkv ──> q, k, v
                               │
             store(k, v) ──────┘  raw KV of the chunk -> slot slots[t // C], offset t % C
             compress(pages the chunk completed)     (compressing layers, before the read:
                                                      a query in a later page of the chunk sees them)
             read:  compressed  -> compressed_read
                    window      -> window_read
                    sparse      -> indexer_topk + sparse_read
    x += out_proj(attn);  x = residual_mlp(x)

    C = 4, start = 6, end = 13:   | 0 1 2 3 | 4 5 6 7 | 8 9 10 11 | 12 . . . |
                                          chunk ^^^^^^^^^^^^^^^^^^^^^^
                                  completed pages: block 1 (ends at 8), block 2 (ends at 12)

Every read goes through ``ops`` under ``lease``, whose row 0 is this sequence; the position-wise
blocks are the reference model's own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from morphcache.engine.ops import AttentionOps
from morphcache.engine.pools import PagePools
from morphcache.engine.store import TensorPageStore
from morphcache.kernels import KernelLease
from morphcache.model import HybridModel, LayerKind


def completed_blocks(start: int, end: int, page_size: int) -> range:
    """Blocks whose last position lies in ``start .. end-1`` (the pages a chunk completes)."""
    return range(start // page_size, end // page_size) if end > start else range(0)


def slot_mapping(positions: Tensor, slots: Sequence[int], page_size: int) -> Tensor:
    """Flat slots ``slots[t // C] * C + t % C`` of positions ``t`` (int64, for ``store``)."""
    table = torch.tensor(list(slots), dtype=torch.int64, device=positions.device)
    return table[positions // page_size] * page_size + positions % page_size


def forward_chunk(model: HybridModel, store: TensorPageStore, ops: AttentionOps, lease: KernelLease,
                  slots: Sequence[int], start: int, tokens: Sequence[int]) -> Tensor:
    """Logits [n, vocab] of ``tokens`` at positions ``start .. start+n-1``.

    State: writes the chunk's raw KV into the pages ``slots`` (block order, covering every position
    up to ``start + n - 1``) in every layer, and the compressed entries of the pages the chunk
    completes; marks those pages' compressed entries fresh in ``store``.  Reads only through ``ops``
    under ``lease``.
    """
    pools: PagePools = store.pools
    cfg = model.config
    c = cfg.page_size
    n = len(tokens)
    if n == 0:
        return torch.zeros(0, cfg.vocab_size, device=pools.device)
    end = start + n
    positions = torch.arange(start, end, dtype=torch.int64, device=pools.device)
    mapping = slot_mapping(positions, slots, c)
    done = [slots[b] for b in completed_blocks(start, end, c)]
    done_ids = torch.tensor(done, dtype=torch.int32, device=pools.device)
    q_seq = torch.zeros(n, dtype=torch.int32, device=pools.device)
    q_pos = positions.to(torch.int32)
    gen = pools.gen_table
    with torch.no_grad(), store.lock:
        x = model.embed(torch.as_tensor(list(tokens), dtype=torch.long, device=pools.device))
        for layer, lp in zip(model.layers, pools.layers, strict=True):
            q, k, v = layer.qkv(layer.attn_norm(x))
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            ops.store(k, v, mapping, lp.raw_k, lp.raw_v)
            if layer.kind is LayerKind.WINDOW:
                attn = ops.window_read(q, q_seq, q_pos, lease, lp.raw_k, lp.raw_v, gen, cfg.window)
            else:
                assert lp.comp_k is not None and lp.comp_v is not None and lp.idx_k is not None
                if done:
                    ops.compress(done_ids, lp.raw_k, lp.raw_v, layer.pool_bias, lp.comp_k, lp.comp_v, lp.idx_k)
                if layer.kind is LayerKind.SPARSE:
                    topk = ops.indexer_topk(q, q_seq, q_pos, lease, lp.idx_k, gen, cfg.top_k, c)
                    attn = ops.sparse_read(q, q_seq, q_pos, lease, topk, lp.comp_k, lp.comp_v,
                                           lp.raw_k, lp.raw_v, gen)
                else:
                    attn = ops.compressed_read(q, q_seq, q_pos, lease, lp.comp_k, lp.comp_v,
                                               lp.raw_k, lp.raw_v, gen)
            x = layer.residual_mlp(x + layer.out_proj(attn))
        if done:
            store.mark_fresh(done)
        return model.head(x)
