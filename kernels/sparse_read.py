"""sparse_read: attention of a sparse-routing layer over the pages the indexer selected.

Query n of sequence seq = q_seq[n] at position t = q_pos[n], bt = t // C, selection
``topk[n]`` (block-table columns b < bt from ``indexer_topk``, -1 = none)::

    topk[n]   [ 5, 0, 3, -1 ]
    keys      ck[bt_row[5]] ck[bt_row[0]] ck[bt_row[3]]  | raw tokens bt*C .. t (tail)

    one softmax over the selected compressed entries and the tail, as in compressed_read.

State: writes only the returned output and, on a generation mismatch, ``error_flags[seq]``
(then ``StaleReadError``).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._attend import (
    NEG_BIG,
    attend_entries,
    attend_raw_span,
    flag_stale,
    load_query,
    read_tiles,
    store_output,
)
from ._contract import Contract, block_span, next_pow2, raise_if_stale
from ._dense import attend_dense, tail_kv
from .errors import DuplicateIndexError, IndexRangeError
from .lease import KernelLease, require_live_lease


def reference_sparse_read(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    block_table: torch.Tensor,
    topk: torch.Tensor,
    comp_k: torch.Tensor,
    comp_v: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
) -> torch.Tensor:
    """Plain-torch sparse read (no generation guard): [N, Hq, D]."""
    c = raw_k.shape[1]
    out = torch.empty_like(q)
    for n in range(q.shape[0]):
        seq, t = int(q_seq[n]), int(q_pos[n])
        sel = topk[n][topk[n] >= 0].long()
        pages = block_table[seq, sel].long()
        tail_page = int(block_table[seq, t // c])
        keys = torch.cat([comp_k[pages], tail_kv(raw_k, tail_page, t)])
        vals = torch.cat([comp_v[pages], tail_kv(raw_v, tail_page, t)])
        out[n] = attend_dense(q[n], keys, vals)
    return out


@triton.jit
def _sparse_read_kernel(
    q_ptr, q_seq_ptr, q_pos_ptr, bt_ptr, lg_ptr, gen_ptr, topk_ptr,
    comp_k_ptr, comp_v_ptr, raw_k_ptr, raw_v_ptr, out_ptr, err_ptr,
    max_pages, scale,
    K: tl.constexpr, C: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_T: tl.constexpr,
    GUARD: tl.constexpr,
):
    n = tl.program_id(0)
    g = tl.program_id(1)
    seq = tl.load(q_seq_ptr + n).to(tl.int64)
    t = tl.load(q_pos_ptr + n)
    bt = t // C
    bt_row = bt_ptr + seq * max_pages
    lg_row = lg_ptr + seq * max_pages
    q = load_query(q_ptr, n, g, G, HKV * G, D, BLOCK_G, BLOCK_D)
    m_i = tl.full([BLOCK_G], NEG_BIG, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    stale = tl.zeros([], dtype=tl.int32)
    for start in tl.range(0, K, BLOCK_S):
        offs = start + tl.arange(0, BLOCK_S)
        sel = tl.load(topk_ptr + n.to(tl.int64) * K + offs, mask=offs < K, other=-1)
        m_i, l_i, acc, stale = attend_entries(
            q, m_i, l_i, acc, stale, sel, sel >= 0, bt_row, lg_row, gen_ptr,
            comp_k_ptr, comp_v_ptr, g, scale, HKV, D, BLOCK_D, GUARD,
        )
    m_i, l_i, acc, stale = attend_raw_span(
        q, m_i, l_i, acc, stale, bt * C, t, bt_row, lg_row, gen_ptr,
        raw_k_ptr, raw_v_ptr, g, scale, C, HKV, D, BLOCK_T, BLOCK_D, GUARD,
    )
    store_output(out_ptr, n, g, acc, l_i, G, HKV * G, D, BLOCK_G, BLOCK_D)
    flag_stale(err_ptr, seq, stale, GUARD)


def launch_sparse_read(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    block_table: torch.Tensor,
    lease_generations: torch.Tensor,
    gen_table: torch.Tensor,
    topk: torch.Tensor,
    comp_k: torch.Tensor,
    comp_v: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
    *,
    guard: bool = True,
    out: torch.Tensor | None = None,
    error_flags: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch without contract checks; returns (out [N, Hq, D], error_flags int32 [B]).

    ``out`` / ``error_flags`` (zeroed int32 [B]) may be preallocated; flags are only ever set to 1.
    ``guard=False`` compiles the generation guard out (benchmarking only: stale pages are read).
    """
    n, hq, d = q.shape
    _, c, hkv, _ = raw_k.shape
    b, max_pages = block_table.shape
    k = topk.shape[1]
    out = torch.empty_like(q) if out is None else out
    err = torch.zeros(b, dtype=torch.int32, device=q.device) if error_flags is None else error_flags
    if n == 0:
        return out, err
    group = hq // hkv
    _sparse_read_kernel[(n, hkv)](
        q, q_seq, q_pos, block_table, lease_generations, gen_table, topk,
        comp_k, comp_v, raw_k, raw_v, out, err,
        max_pages, 1.0 / math.sqrt(d),
        K=k, C=c, HKV=hkv, G=group, D=d,
        BLOCK_G=next_pow2(group), BLOCK_D=next_pow2(d),
        BLOCK_S=read_tiles(group, d, k), BLOCK_T=read_tiles(group, d, c),
        GUARD=guard,
    )
    return out, err


def _check_selection(op: str, topk: torch.Tensor, q_pos: torch.Tensor, c: int) -> None:
    """Entries of topk[n] are -1 or distinct block columns b < q_pos[n] // C."""
    if topk.numel() == 0:
        return
    bt = (q_pos // c).to(topk.dtype)[:, None]
    bad = (topk < -1) | (topk >= bt)
    if bool(bad.any()):
        n, j = (int(i) for i in torch.nonzero(bad)[0].tolist())
        raise IndexRangeError(
            f"{op}: topk[{n}, {j}]: expected -1 or a complete block < q_pos // C = {int(bt[n])}, "
            f"got {int(topk[n, j])}"
        )
    s, _ = torch.sort(topk, dim=1)
    dup = (s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)
    if bool(dup.any()):
        n, j = (int(i) for i in torch.nonzero(dup)[0].tolist())
        raise DuplicateIndexError(f"{op}: topk[{n}]: expected distinct blocks, got {int(s[n, j + 1])} twice")


def sparse_read(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    lease: KernelLease,
    topk: torch.Tensor,
    comp_k: torch.Tensor,
    comp_v: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
    gen_table: torch.Tensor,
    *,
    alignment: int = 16,
) -> torch.Tensor:
    """Sparse-routing attention of q [N, Hq, D] under a live ``lease``: [N, Hq, D].

    ``topk`` int32 [N, K] holds block-table columns (as returned by ``indexer_topk``), -1 = none.
    Query n reads the compressed entries of its selected blocks plus its raw tail.  Raises
    ``LeaseRequiredError`` / another ``KernelContractError`` before launch, ``StaleReadError``
    after it if a page's generation moved.
    """
    lease = require_live_lease(lease, "sparse_read")
    ct = Contract("sparse_read", alignment, _sparse_read_kernel)
    ct.tensor("raw_k", raw_k, torch.float32, ("P", "C", "Hkv", "D"), pooled=True)
    ct.tensor("raw_v", raw_v, torch.float32, ("P", "C", "Hkv", "D"), pooled=True)
    ct.tensor("comp_k", comp_k, torch.float32, ("P", "Hkv", "D"), pooled=True)
    ct.tensor("comp_v", comp_v, torch.float32, ("P", "Hkv", "D"), pooled=True)
    ct.tensor("gen_table", gen_table, torch.int32, ("P",), index=True)
    block_table, lease_gens, seq_lens = ct.lease(lease)
    c = ct.dim("C")
    q, q_seq, q_pos = ct.queries(q, q_seq, q_pos, block_table, seq_lens, c)
    ct.tensor("topk", topk, torch.int32, ("N", "K"), index=True)
    ct.param("topk.shape[1]", ct.dim("K"), minimum=1)
    _check_selection("sparse_read", topk, q_pos, c)
    max_pages = ct.dim("max_pages")
    bt = (q_pos // c).long()
    touched = block_span(q_pos, max_pages, bt, bt)
    if q_seq.numel():
        rows = torch.arange(topk.shape[0], device=topk.device)[:, None].expand_as(topk)
        sel = topk >= 0
        touched[rows[sel], topk[sel].long()] = True
    ct.touched_pages(block_table, q_seq, touched)
    out, err = launch_sparse_read(
        q, q_seq, q_pos, block_table, lease_gens, gen_table, topk, comp_k, comp_v, raw_k, raw_v
    )
    raise_if_stale("sparse_read", err)
    return out
