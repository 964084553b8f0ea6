"""window_read: attention of a sliding-window layer over the raw page pool.

Query at position t with window W reads the raw KV of positions max(0, t-W+1) .. t, across pages::

    C = 4, W = 6, t = 10
    positions   0 1 2 3 | 4 5 6 7 | 8 9 10
    blocks      b=0     | b=1     | b=2
    window                  5 6 7 | 8 9 10      blocks 1..2 touched; block 0 may already be freed
                                                (block_table entry -1) without harm

State: writes only the returned output and, on a generation mismatch, ``error_flags[seq]``
(then ``StaleReadError``).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._attend import NEG_BIG, attend_raw_span, flag_stale, load_query, read_tiles, store_output
from ._contract import Contract, block_span, next_pow2, raise_if_stale
from ._dense import attend_dense
from .lease import KernelLease, require_live_lease


def reference_window_read(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    block_table: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
    window: int,
) -> torch.Tensor:
    """Plain-torch window read (no generation guard): [N, Hq, D]."""
    c = raw_k.shape[1]
    out = torch.empty_like(q)
    for n in range(q.shape[0]):
        seq, t = int(q_seq[n]), int(q_pos[n])
        pos = torch.arange(max(0, t - window + 1), t + 1)
        pages = block_table[seq, pos // c].long()
        out[n] = attend_dense(q[n], raw_k[pages, pos % c], raw_v[pages, pos % c])
    return out


@triton.jit
def _window_read_kernel(
    q_ptr, q_seq_ptr, q_pos_ptr, bt_ptr, lg_ptr, gen_ptr,
    raw_k_ptr, raw_v_ptr, out_ptr, err_ptr,
    max_pages, window, scale,
    C: tl.constexpr, HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
    GUARD: tl.constexpr,
):
    n = tl.program_id(0)
    g = tl.program_id(1)
    seq = tl.load(q_seq_ptr + n).to(tl.int64)
    t = tl.load(q_pos_ptr + n)
    lo = tl.maximum(t - window + 1, 0)
    bt_row = bt_ptr + seq * max_pages
    lg_row = lg_ptr + seq * max_pages
    q = load_query(q_ptr, n, g, G, HKV * G, D, BLOCK_G, BLOCK_D)
    m_i = tl.full([BLOCK_G], NEG_BIG, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    stale = tl.zeros([], dtype=tl.int32)
    m_i, l_i, acc, stale = attend_raw_span(
        q, m_i, l_i, acc, stale, lo, t, bt_row, lg_row, gen_ptr,
        raw_k_ptr, raw_v_ptr, g, scale, C, HKV, D, BLOCK_T, BLOCK_D, GUARD,
    )
    store_output(out_ptr, n, g, acc, l_i, G, HKV * G, D, BLOCK_G, BLOCK_D)
    flag_stale(err_ptr, seq, stale, GUARD)


def launch_window_read(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    block_table: torch.Tensor,
    lease_generations: torch.Tensor,
    gen_table: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
    window: int,
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
    span = min(window, max_pages * c)
    _window_read_kernel[(n, hkv)](
        q, q_seq, q_pos, block_table, lease_generations, gen_table,
        raw_k, raw_v, out, err,
        max_pages, window, 1.0 / math.sqrt(d),
        C=c, HKV=hkv, G=group, D=d,
        BLOCK_G=next_pow2(group), BLOCK_D=next_pow2(d), BLOCK_T=read_tiles(group, d, span),
        GUARD=guard,
    )
    return out, err


def window_read(
    q: torch.Tensor,
    q_seq: torch.Tensor,
    q_pos: torch.Tensor,
    lease: KernelLease,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
    gen_table: torch.Tensor,
    window: int,
    *,
    alignment: int = 16,
) -> torch.Tensor:
    """Sliding-window attention of q [N, Hq, D] under a live ``lease``: [N, Hq, D].

    Query n reads raw_k/raw_v [P, C, Hkv, D] at positions max(0, t-W+1) .. t of row q_seq[n]
    (t = q_pos[n], W = ``window`` >= 1; a window longer than the sequence reads from position 0).
    Raises ``LeaseRequiredError`` / another ``KernelContractError`` before launch,
    ``StaleReadError`` after it if a page's generation moved.
    """
    lease = require_live_lease(lease, "window_read")
    ct = Contract("window_read", alignment, _window_read_kernel)
    window = ct.param("window", window, minimum=1)
    if window > 2**31 - 1:
        window = 2**31 - 1
    ct.tensor("raw_k", raw_k, torch.float32, ("P", "C", "Hkv", "D"), pooled=True)
    ct.tensor("raw_v", raw_v, torch.float32, ("P", "C", "Hkv", "D"), pooled=True)
    ct.tensor("gen_table", gen_table, torch.int32, ("P",), index=True)
    block_table, lease_gens, seq_lens = ct.lease(lease)
    c = ct.dim("C")
    q, q_seq, q_pos = ct.queries(q, q_seq, q_pos, block_table, seq_lens, c)
    first = ((q_pos - window + 1).clamp(min=0) // c).long()
    last = (q_pos // c).long()
    ct.touched_pages(block_table, q_seq, block_span(q_pos, ct.dim("max_pages"), first, last))
    out, err = launch_window_read(
        q, q_seq, q_pos, block_table, lease_gens, gen_table, raw_k, raw_v, window
    )
    raise_if_stale("window_read", err)
    return out
