"""compressed_read: attention of a compressed-history layer over paged pools.

Query n of sequence seq = q_seq[n] at position t = q_pos[n], page size C, bt = t // C::

    blocks      0     1     ...   bt-1  | bt
    keys        ck[0] ck[1] ...   ck[.] | raw tokens bt*C .. t   (the uncompressed tail)
                comp_k/comp_v pool      | raw_k/raw_v pool

    one softmax over all of them:  out[h] = softmax_j(s * q[h] . key_j[g]) @ val_j[g],  g = h // (Hq/Hkv)

Decode (one query per sequence) and prefill (many queries per sequence) use the same kernel: every
query carries its own row and position.  State: writes only the returned output and, when a page's
generation moved since the lease was granted, ``error_flags[seq]`` (then ``StaleReadError``).
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
from .lease import KernelLease, require_live_lease


def reference_compressed_read(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    block_table: torch.Tensor,
    comp_k: torch.Tensor,
    comp_v: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
) -> torch.Tensor:
    """Plain-torch compressed read (no generation guard): [N, Hq, D]."""
    c = raw_k.shape[1]
    out = torch.empty_like(q)
    for n in range(q.shape[0]):
        seq, t = int(q_seq[n]), int(q_pos[n])
        bt = t // c
        pages = block_table[seq, :bt].long()
        tail_page = int(block_table[seq, bt])
        keys = torch.cat([comp_k[pages], tail_kv(raw_k, tail_page, t)])
        vals = torch.cat([comp_v[pages], tail_kv(raw_v, tail_page, t)])
        out[n] = attend_dense(q[n], keys, vals)
    return out


@triton.jit
def _compressed_read_kernel(
    q_ptr, q_seq_ptr, q_pos_ptr, bt_ptr, lg_ptr, gen_ptr,
    comp_k_ptr, comp_v_ptr, raw_k_ptr, raw_v_ptr, out_ptr, err_ptr,
    max_pages, scale,
    C: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_T: tl.constexpr,
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
    for start in range(0, bt, BLOCK_P):
        blocks = start + tl.arange(0, BLOCK_P)
        m_i, l_i, acc, stale = attend_entries(
            q, m_i, l_i, acc, stale, blocks, blocks < bt, bt_row, lg_row, gen_ptr,
            comp_k_ptr, comp_v_ptr, g, scale, HKV, D, BLOCK_D, GUARD,
        )
    m_i, l_i, acc, stale = attend_raw_span(
        q, m_i, l_i, acc, stale, bt * C, t, bt_row, lg_row, gen_ptr,
        raw_k_ptr, raw_v_ptr, g, scale, C, HKV, D, BLOCK_T, BLOCK_D, GUARD,
    )
    store_output(out_ptr, n, g, acc, l_i, G, HKV * G, D, BLOCK_G, BLOCK_D)
    flag_stale(err_ptr, seq, stale, GUARD)


def launch_compressed_read(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    block_table: torch.Tensor,
    lease_generations: torch.Tensor,
    gen_table: torch.Tensor,
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
    out = torch.empty_like(q) if out is None else out
    err = torch.zeros(b, dtype=torch.int32, device=q.device) if error_flags is None else error_flags
    if n == 0:
        return out, err
    group = hq // hkv
    _compressed_read_kernel[(n, hkv)](
        q, q_seq, q_pos, block_table, lease_generations, gen_table,
        comp_k, comp_v, raw_k, raw_v, out, err,
        max_pages, 1.0 / math.sqrt(d),
        C=c, HKV=hkv, G=group, D=d,
        BLOCK_G=next_pow2(group), BLOCK_D=next_pow2(d),
        BLOCK_P=read_tiles(group, d, max_pages), BLOCK_T=read_tiles(group, d, c),
        GUARD=guard,
    )
    return out, err


def compressed_read(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    lease: KernelLease,
    comp_k: torch.Tensor,
    comp_v: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
    gen_table: torch.Tensor,
    *,
    alignment: int = 16,
) -> torch.Tensor:
    """Compressed-history attention of queries q [N, Hq, D] under a live ``lease``: [N, Hq, D].

    Query n reads row q_seq[n] of ``lease.block_table`` at position q_pos[n]: the compressed
    entries comp_k/comp_v [P, Hkv, D] of blocks 0..bt-1 and the raw tail raw_k/raw_v [P, C, Hkv, D]
    of block bt up to q_pos[n].  Raises ``LeaseRequiredError`` / another ``KernelContractError``
    before launch, ``StaleReadError`` after it if a page's generation moved.
    """
    lease = require_live_lease(lease, "compressed_read")
    ct = Contract("compressed_read", alignment, _compressed_read_kernel)
    ct.tensor("raw_k", raw_k, torch.float32, ("P", "C", "Hkv", "D"), pooled=True)
    ct.tensor("raw_v", raw_v, torch.float32, ("P", "C", "Hkv", "D"), pooled=True)
    ct.tensor("comp_k", comp_k, torch.float32, ("P", "Hkv", "D"), pooled=True)
    ct.tensor("comp_v", comp_v, torch.float32, ("P", "Hkv", "D"), pooled=True)
    ct.tensor("gen_table", gen_table, torch.int32, ("P",), index=True)
    block_table, lease_gens, seq_lens = ct.lease(lease)
    c = ct.dim("C")
    q, q_seq, q_pos = ct.queries(q, q_seq, q_pos, block_table, seq_lens, c)
    bt = (q_pos // c).long()
    ct.touched_pages(block_table, q_seq, block_span(q_pos, ct.dim("max_pages"), torch.zeros_like(bt), bt))
    out, err = launch_compressed_read(
        q, q_seq, q_pos, block_table, lease_gens, gen_table, comp_k, comp_v, raw_k, raw_v
    )
    raise_if_stale("compressed_read", err)
    return out
