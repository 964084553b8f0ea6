"""indexer_topk: route each query to the top-k complete blocks of its sequence.

Query n of sequence seq = q_seq[n] at position t = q_pos[n], bt = t // C::

    qi[d]      = mean over query heads h of q[n, h, d]
    score[b]   = qi . idx_k[block_table[seq, b]]            for b = 0 .. bt-1
    topk[n]    = the k columns b with the highest scores, descending,
                 ties -> lower b first, padded with -1 (k may exceed bt)

The kernel streams the eligible blocks in tiles of BLOCK_B and merges each tile into a running,
sorted top-k buffer::

    buffer (k best so far, sorted)  +  tile scores  --k x (pick max, lowest b on ties)-->  new buffer

State: writes only the returned selection and, on a generation mismatch, ``error_flags[seq]``
(then ``StaleReadError``).  Stale blocks are never selected.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._contract import Contract, block_span, next_pow2, raise_if_stale
from .lease import KernelLease, require_live_lease

_NO_BLOCK = tl.constexpr(2**30)  # sort key of an empty slot: above every real block column


def reference_indexer_topk(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    block_table: torch.Tensor,
    idx_k: torch.Tensor,
    k: int,
    page_size: int,
) -> torch.Tensor:
    """Plain-torch indexer top-k (no generation guard): int32 [N, k]."""
    out = torch.full((q.shape[0], k), -1, dtype=torch.int32, device=q.device)
    for n in range(q.shape[0]):
        seq, bt = int(q_seq[n]), int(q_pos[n]) // page_size
        if bt == 0:
            continue
        qi = q[n].mean(dim=0)
        scores = idx_k[block_table[seq, :bt].long()] @ qi
        order = torch.sort(scores, descending=True, stable=True).indices[:k]
        out[n, : order.numel()] = order.to(torch.int32)
    return out


@triton.jit
def _indexer_topk_kernel(
    q_ptr, q_seq_ptr, q_pos_ptr, bt_ptr, lg_ptr, gen_ptr, idx_k_ptr, out_ptr, err_ptr,
    max_pages,
    K: tl.constexpr, C: tl.constexpr, HQ: tl.constexpr, D: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
    GUARD: tl.constexpr,
):
    n = tl.program_id(0)
    seq = tl.load(q_seq_ptr + n).to(tl.int64)
    t = tl.load(q_pos_ptr + n)
    bt = t // C
    bt_row = bt_ptr + seq * max_pages
    lg_row = lg_ptr + seq * max_pages

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    q = tl.load(
        q_ptr + n.to(tl.int64) * (HQ * D) + offs_h[:, None] * D + offs_d[None, :],
        mask=(offs_h[:, None] < HQ) & d_ok[None, :], other=0.0,
    )
    qi = tl.sum(q, axis=0) / HQ

    slots = tl.arange(0, BLOCK_K)
    best_s = tl.full([BLOCK_K], float("-inf"), dtype=tl.float32)
    best_b = tl.full([BLOCK_K], _NO_BLOCK, dtype=tl.int32)
    stale = tl.zeros([], dtype=tl.int32)
    for start in range(0, bt, BLOCK_B):
        blk = start + tl.arange(0, BLOCK_B)
        valid = blk < bt
        page = tl.load(bt_row + blk, mask=valid, other=0)
        if GUARD:
            fresh = tl.load(gen_ptr + page, mask=valid, other=0) == tl.load(lg_row + blk, mask=valid, other=0)
            stale += tl.sum((valid & (fresh == 0)).to(tl.int32), axis=0)
            valid = valid & fresh
        keys = tl.load(
            idx_k_ptr + page.to(tl.int64)[:, None] * D + offs_d[None, :],
            mask=valid[:, None] & d_ok[None, :], other=0.0,
        )
        tile_s = tl.where(valid, tl.sum(keys * qi[None, :], axis=1), float("-inf"))
        tile_b = tl.where(valid, blk, _NO_BLOCK)
        # merge: K rounds of "take the best of buffer and tile"; buffer columns < tile columns,
        # so the lowest column among equal scores is the tie winner in both halves.
        new_s = tl.full([BLOCK_K], float("-inf"), dtype=tl.float32)
        new_b = tl.full([BLOCK_K], _NO_BLOCK, dtype=tl.int32)
        n_cand = tl.minimum(tl.sum((best_b < _NO_BLOCK).to(tl.int32), axis=0)
                            + tl.sum(valid.to(tl.int32), axis=0), K)
        for i in range(0, n_cand):
            top = tl.maximum(tl.max(best_s, axis=0), tl.max(tile_s, axis=0))
            pick = tl.minimum(
                tl.min(tl.where((best_s == top) & (best_b < _NO_BLOCK), best_b, _NO_BLOCK), axis=0),
                tl.min(tl.where((tile_s == top) & (tile_b < _NO_BLOCK), tile_b, _NO_BLOCK), axis=0),
            )
            new_s = tl.where(slots == i, top, new_s)
            new_b = tl.where(slots == i, pick, new_b)
            best_s = tl.where(best_b == pick, float("-inf"), best_s)
            best_b = tl.where(best_b == pick, _NO_BLOCK, best_b)
            tile_s = tl.where(tile_b == pick, float("-inf"), tile_s)
            tile_b = tl.where(tile_b == pick, _NO_BLOCK, tile_b)
        best_s = new_s
        best_b = new_b
    result = tl.where(best_b < _NO_BLOCK, best_b, -1)
    tl.store(out_ptr + n.to(tl.int64) * K + slots, result, mask=slots < K)
    if GUARD:
        tl.store(err_ptr + seq, 1, mask=stale > 0)


def launch_indexer_topk(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    block_table: torch.Tensor,
    lease_generations: torch.Tensor,
    gen_table: torch.Tensor,
    idx_k: torch.Tensor,
    k: int,
    page_size: int,
    *,
    guard: bool = True,
    out: torch.Tensor | None = None,
    error_flags: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch without contract checks; returns (topk int32 [N, k], error_flags int32 [B]).

    ``out`` / ``error_flags`` (zeroed int32 [B]) may be preallocated; flags are only ever set to 1.
    ``guard=False`` compiles the generation guard out (benchmarking only).
    """
    n, hq, d = q.shape
    b, max_pages = block_table.shape
    if out is None:
        out = torch.empty((n, k), dtype=torch.int32, device=q.device)
    err = torch.zeros(b, dtype=torch.int32, device=q.device) if error_flags is None else error_flags
    if n == 0:
        return out, err
    block_d = next_pow2(d)
    block_b = max(1, min(64, next_pow2(max_pages), 8192 // block_d))
    _indexer_topk_kernel[(n,)](
        q, q_seq, q_pos, block_table, lease_generations, gen_table, idx_k, out, err,
        max_pages,
        K=k, C=page_size, HQ=hq, D=d,
        BLOCK_K=next_pow2(k), BLOCK_B=block_b, BLOCK_H=next_pow2(hq), BLOCK_D=block_d,
        GUARD=guard,
    )
    return out, err


def indexer_topk(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    lease: KernelLease,
    idx_k: torch.Tensor,
    gen_table: torch.Tensor,
    k: int,
    *,
    page_size: int,
    alignment: int = 16,
) -> torch.Tensor:
    """Select, per query, the top-``k`` complete blocks of its row by indexer score: int32 [N, k].

    q [N, Hq, D]; idx_k [P, D] (indexer keys, one per page); ``page_size`` is C.  Entries are
    block-table columns b < q_pos // C in descending score order, ties to the lower b, padded
    with -1.  Raises ``LeaseRequiredError`` / another ``KernelContractError`` before launch,
    ``StaleReadError`` after it if a page's generation moved.
    """
    lease = require_live_lease(lease, "indexer_topk")
    ct = Contract("indexer_topk", alignment, _indexer_topk_kernel)
    k = ct.param("k", k, minimum=1)
    ct.bind("C", ct.param("page_size", page_size, minimum=1))
    ct.tensor("idx_k", idx_k, torch.float32, ("P", "D"), pooled=True)
    ct.tensor("gen_table", gen_table, torch.int32, ("P",), index=True)
    block_table, lease_gens, seq_lens = ct.lease(lease)
    q, q_seq, q_pos = ct.queries(q, q_seq, q_pos, block_table, seq_lens, page_size)
    bt = (q_pos // page_size).long()
    ct.touched_pages(block_table, q_seq, block_span(q_pos, ct.dim("max_pages"), torch.zeros_like(bt), bt - 1))
    out, err = launch_indexer_topk(
        q, q_seq, q_pos, block_table, lease_gens, gen_table, idx_k, k, page_size
    )
    raise_if_stale("indexer_topk", err)
    return out
