"""Device helpers shared by the three read kernels (compressed, sparse, window).

One program handles one query n and one kv head g, i.e. the G = Hq / Hkv query heads
g*G .. g*G+G-1 that read kv head g (GQA).  Keys arrive in tiles; each tile updates a running
(max m, normaliser l, accumulator acc) triple, the online softmax::

    m'   = max(m, max_j s_j)
    l'   = l * exp(m - m') + sum_j exp(s_j - m')
    acc' = acc * exp(m - m') + sum_j exp(s_j - m') * v_j          out = acc / l

Two key sources:

* compressed entries of blocks ``b`` (a vector of block-table columns): page = block_table[seq, b],
  key = comp_k[page, g, :];
* raw tokens of positions lo..t: b = pos // C, page = block_table[seq, b], key = raw_k[page, pos % C, g, :].

Generation guard (``GUARD``): a page whose ``gen_table[page]`` differs from
``lease_generations[seq, b]`` is masked out of the softmax and counted in ``stale``; the kernel then
sets ``error_flags[seq] = 1``.  With ``GUARD=False`` the checks are compiled out.
"""

from __future__ import annotations

import triton
import triton.language as tl

NEG_BIG = tl.constexpr(-1.0e30)  # running-max seed: finite so exp(m - m') stays 1 while no key has been seen


@triton.jit
def online_update(s, v, m_i, l_i, acc):
    """Fold scores s [BG, T] (masked = -inf) and values v [T, BD] into (m_i, l_i, acc)."""
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_new = l_i * alpha + tl.sum(p, axis=1)
    acc_new = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
    return m_new, l_new, acc_new


@triton.jit
def load_query(q_ptr, n, g, G: tl.constexpr, HQ: tl.constexpr, D: tl.constexpr,
               BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr):
    """Load the G query heads of query n that read kv head g, as [BLOCK_G, BLOCK_D] (zero padded)."""
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_g[:, None] < G) & (offs_d[None, :] < D)
    ptrs = q_ptr + n.to(tl.int64) * (HQ * D) + (g * G + offs_g[:, None]) * D + offs_d[None, :]
    return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def store_output(out_ptr, n, g, acc, l_i, G: tl.constexpr, HQ: tl.constexpr, D: tl.constexpr,
                 BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr):
    """Write acc / l for the G heads of (n, g); rows that saw no key at all are written as 0."""
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_g[:, None] < G) & (offs_d[None, :] < D)
    denom = tl.where(l_i > 0.0, l_i, 1.0)
    ptrs = out_ptr + n.to(tl.int64) * (HQ * D) + (g * G + offs_g[:, None]) * D + offs_d[None, :]
    tl.store(ptrs, acc / denom[:, None], mask=mask)


@triton.jit
def attend_entries(q, m_i, l_i, acc, stale, blocks, valid, bt_row_ptr, lg_row_ptr, gen_ptr,
                   comp_k_ptr, comp_v_ptr, g, scale,
                   HKV: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr, GUARD: tl.constexpr):
    """Attend to the compressed entries of block-table columns ``blocks`` [BP] where ``valid``."""
    page = tl.load(bt_row_ptr + blocks, mask=valid, other=0)
    if GUARD:
        lease_gen = tl.load(lg_row_ptr + blocks, mask=valid, other=0)
        live_gen = tl.load(gen_ptr + page, mask=valid, other=0)
        fresh = live_gen == lease_gen
        stale += tl.sum((valid & (fresh == 0)).to(tl.int32), axis=0)
        valid = valid & fresh
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = valid[:, None] & (offs_d[None, :] < D)
    kv_off = page.to(tl.int64)[:, None] * (HKV * D) + g * D + offs_d[None, :]
    k = tl.load(comp_k_ptr + kv_off, mask=kv_mask, other=0.0)
    v = tl.load(comp_v_ptr + kv_off, mask=kv_mask, other=0.0)
    s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale
    s = tl.where(valid[None, :], s, float("-inf"))
    m_i, l_i, acc = online_update(s, v, m_i, l_i, acc)
    return m_i, l_i, acc, stale


@triton.jit
def attend_raw_span(q, m_i, l_i, acc, stale, lo, t, bt_row_ptr, lg_row_ptr, gen_ptr,
                    raw_k_ptr, raw_v_ptr, g, scale,
                    C: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
                    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, GUARD: tl.constexpr):
    """Attend to the raw tokens of positions lo..t (inclusive), BLOCK_T positions per tile.

    ::

        pos   lo ........................ t
        b     pos // C      (column of the block table)
        off   pos %  C      (token slot inside page block_table[seq, b])
    """
    offs_d = tl.arange(0, BLOCK_D)
    for start in range(lo, t + 1, BLOCK_T):
        pos = start + tl.arange(0, BLOCK_T)
        valid = pos <= t
        blk = pos // C
        page = tl.load(bt_row_ptr + blk, mask=valid, other=0)
        if GUARD:
            lease_gen = tl.load(lg_row_ptr + blk, mask=valid, other=0)
            live_gen = tl.load(gen_ptr + page, mask=valid, other=0)
            fresh = live_gen == lease_gen
            stale += tl.sum((valid & (fresh == 0)).to(tl.int32), axis=0)
            valid = valid & fresh
        slot = page.to(tl.int64) * C + (pos - blk * C)
        kv_mask = valid[:, None] & (offs_d[None, :] < D)
        kv_off = slot[:, None] * (HKV * D) + g * D + offs_d[None, :]
        k = tl.load(raw_k_ptr + kv_off, mask=kv_mask, other=0.0)
        v = tl.load(raw_v_ptr + kv_off, mask=kv_mask, other=0.0)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_i, l_i, acc = online_update(s, v, m_i, l_i, acc)
    return m_i, l_i, acc, stale


@triton.jit
def flag_stale(err_ptr, seq, stale, GUARD: tl.constexpr):
    """Set error_flags[seq] = 1 if this program met a stale page."""
    if GUARD:
        tl.store(err_ptr + seq, 1, mask=stale > 0)


def read_tiles(g: int, d: int, span: int, budget: int = 8192, cap: int = 64) -> int:
    """Keys per tile: a power of two <= cap, <= span (rounded up), with BG*T*BD <= budget."""
    per_key = triton.next_power_of_2(max(g, 1)) * triton.next_power_of_2(max(d, 1))
    t = max(1, budget // per_key)
    t = 1 << (t.bit_length() - 1)
    return max(1, min(t, cap, triton.next_power_of_2(max(span, 1))))
