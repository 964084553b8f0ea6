"""gdn_prefill: the chunked gated delta rule over ragged sequences, updating each one's state slot.

Sequence n owns rows cu_seqlens[n] .. cu_seqlens[n+1]-1 of q, k [T, H, K], v [T, H, V] and
g, beta [T, H]; its first row sits at absolute position start_pos[n]. Its working state is
states[state_slot[n]] ([H, K, V] per slot), read at the start (or zeros if reset[n]) and written
back at the end. Chunks of at most BLOCK_T rows never cross a page boundary, so the state at every
boundary the prefill passes can be saved as a checkpoint::

    C = 4, start_pos = 6, 9 rows (BLOCK_T = 16)
    positions   6 7 | 8 9 10 11 | 12 13 14
    chunks      [ ] | [       ] | [      ]
    checkpoint    ^ after page 1   ^ after page 2     -> states[checkpoint_slots[n, 1]], [n, 2]

Per chunk (G = cumulative g, gamma = exp(G), see docs/model-math.md, "Chunked form")::

    T_inv = (I + strict_lower(beta * exp(G_i - G_j) * K K^T))^-1           forward substitution
    U     = T_inv (beta V) - T_inv (beta gamma K) S
    O     = (gamma Q) S + (lower(exp(G_i - G_j)) * Q K^T) U
    S     = gamma_last S + (exp(G_last - G) K)^T U

Columns of S evolve independently, so programs split V into BLOCK_V-wide blocks.

State: writes out, states[state_slot[n]] and the checkpoint slots named in checkpoint_slots
(-1: no checkpoint at that boundary). No lease: a sequence's working state is its own; reading a
shared checkpoint goes through ``gdn_restore``.

flash-linear-attention (``fla-core`` 0.6.0) was tried as a dependency for this kernel: its chunked
kernel does not run under ``TRITON_INTERPRET=1`` on CPU (it queries a GPU driver and fails with
"0 active drivers") and its fused recurrent kernel returned NaN there, so these kernels are our own.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._contract import Contract, next_pow2
from ._delta import delta_step
from .errors import IndexRangeError, ShapeError


def reference_gdn_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    start_pos: torch.Tensor,
    state_slot: torch.Tensor,
    reset: torch.Tensor,
    states: torch.Tensor,
    page_size: int,
    checkpoint_slots: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain-torch ``gdn_prefill``, one token at a time (the definition): returns out [T, H, V]."""
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=v.dtype, device=v.device)
    for n in range(start_pos.shape[0]):
        bos, eos, slot = int(cu_seqlens[n]), int(cu_seqlens[n + 1]), int(state_slot[n])
        s = torch.zeros_like(states[slot]) if int(reset[n]) else states[slot].clone()
        for i, row in enumerate(range(bos, eos)):
            out[row], s = delta_step(s, q[row], k[row], v[row], g[row], beta[row])
            after = int(start_pos[n]) + i + 1
            if checkpoint_slots is not None and after % page_size == 0:
                saved = int(checkpoint_slots[n, after // page_size - 1])
                if saved >= 0:
                    states[saved] = s
        states[slot] = s
    return out


@triton.jit
def _gdn_prefill_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, cu_ptr, start_ptr, state_slot_ptr, reset_ptr,
    states_ptr, ckpt_ptr, out_ptr, max_pages,
    C: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, CHECKPOINTS: tl.constexpr,
):
    n = tl.program_id(0)
    h = tl.program_id(1)
    vb = tl.program_id(2)
    bos = tl.load(cu_ptr + n)
    eos = tl.load(cu_ptr + n + 1)
    start = tl.load(start_ptr + n)
    slot = tl.load(state_slot_ptr + n).to(tl.int64)
    reset = tl.load(reset_ptr + n)
    offs_t = tl.arange(0, BLOCK_T)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = vb * BLOCK_V + tl.arange(0, BLOCK_V)
    k_ok = offs_k < K
    v_ok = offs_v < V
    s_mask = k_ok[:, None] & v_ok[None, :]
    s_tile = h * (K * V) + offs_k[:, None] * V + offs_v[None, :]
    s = tl.load(states_ptr + slot * (H * K * V) + s_tile, mask=s_mask, other=0.0)
    s = tl.where(reset == 0, s, 0.0)
    incl = offs_t[:, None] >= offs_t[None, :]
    strict = offs_t[:, None] > offs_t[None, :]
    eye = tl.where(offs_t[:, None] == offs_t[None, :], 1.0, 0.0)
    p = bos
    while p < eos:
        page_end = bos + ((start + (p - bos)) // C + 1) * C - start  # row where the next page begins
        e = tl.minimum(tl.minimum(p + BLOCK_T, eos), page_end)
        t_ok = offs_t < e - p
        rows = (p + offs_t).to(tl.int64)
        qk_off = rows[:, None] * (H * K) + h * K + offs_k[None, :]
        qk_mask = t_ok[:, None] & k_ok[None, :]
        q = tl.load(q_ptr + qk_off, mask=qk_mask, other=0.0)
        k = tl.load(k_ptr + qk_off, mask=qk_mask, other=0.0)
        v_off = rows[:, None] * (H * V) + h * V + offs_v[None, :]
        v_mask = t_ok[:, None] & v_ok[None, :]
        v = tl.load(v_ptr + v_off, mask=v_mask, other=0.0)
        g = tl.load(g_ptr + rows * H + h, mask=t_ok, other=0.0)
        beta = tl.load(beta_ptr + rows * H + h, mask=t_ok, other=0.0)

        cum = tl.cumsum(g, axis=0)
        gamma = tl.exp(cum)
        decay = tl.where(incl, tl.exp(tl.where(incl, cum[:, None] - cum[None, :], 0.0)), 0.0)
        kk = tl.dot(k, tl.trans(k), input_precision="ieee")
        a = tl.where(strict, beta[:, None] * decay * kk, 0.0)
        t_inv = eye
        for i in range(1, BLOCK_T):  # row i of (I + a)^-1 from the rows above it
            a_i = tl.sum(tl.where(offs_t[:, None] == i, a, 0.0), axis=0)
            below = tl.sum(a_i[:, None] * t_inv, axis=0)
            t_inv = tl.where(offs_t[:, None] == i, t_inv - below[None, :], t_inv)
        w = tl.dot(t_inv, (beta * gamma)[:, None] * k, input_precision="ieee")
        u = tl.dot(t_inv, beta[:, None] * v, input_precision="ieee") - tl.dot(w, s, input_precision="ieee")
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * decay
        o = tl.dot(gamma[:, None] * q, s, input_precision="ieee") + tl.dot(qk, u, input_precision="ieee")
        tl.store(out_ptr + v_off, o, mask=v_mask)
        last = tl.sum(tl.where(offs_t == e - p - 1, cum, 0.0), axis=0)
        k_decayed = tl.where(t_ok[:, None], k * tl.exp(last - cum)[:, None], 0.0)
        s = tl.exp(last) * s + tl.dot(tl.trans(k_decayed), u, input_precision="ieee")

        if CHECKPOINTS:
            after = start + (e - bos)  # absolute position after the chunk
            boundary = (after % C) == 0
            saved = tl.load(ckpt_ptr + n.to(tl.int64) * max_pages + after // C - 1, mask=boundary, other=-1)
            saved = saved.to(tl.int64)
            keep = (tl.zeros([BLOCK_K, BLOCK_V], dtype=tl.int64) + saved) >= 0
            tl.store(states_ptr + saved * (H * K * V) + s_tile, s, mask=s_mask & keep)
        p = e
    tl.store(states_ptr + slot * (H * K * V) + s_tile, s, mask=s_mask)


def launch_gdn_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    start_pos: torch.Tensor,
    state_slot: torch.Tensor,
    reset: torch.Tensor,
    states: torch.Tensor,
    page_size: int,
    checkpoint_slots: torch.Tensor | None = None,
    *,
    block_t: int = 16,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Launch without contract checks (arguments already validated); returns out [T, H, V]."""
    t, h, dk = q.shape
    dv = v.shape[2]
    b = start_pos.shape[0]
    out = torch.empty(t, h, dv, dtype=v.dtype, device=v.device) if out is None else out
    if b == 0:
        return out
    block_v = min(next_pow2(max(dv, 16)), 64)
    ckpt = checkpoint_slots if checkpoint_slots is not None else state_slot
    max_pages = checkpoint_slots.shape[1] if checkpoint_slots is not None else 0
    _gdn_prefill_kernel[(b, h, triton.cdiv(dv, block_v))](
        q, k, v, g, beta, cu_seqlens, start_pos, state_slot, reset, states, ckpt, out, max_pages,
        C=page_size, H=h, K=dk, V=dv,
        BLOCK_T=max(16, next_pow2(block_t)), BLOCK_K=next_pow2(max(dk, 16)), BLOCK_V=block_v,
        CHECKPOINTS=checkpoint_slots is not None,
    )
    return out


def gdn_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    start_pos: torch.Tensor,
    state_slot: torch.Tensor,
    reset: torch.Tensor,
    states: torch.Tensor,
    *,
    page_size: int,
    checkpoint_slots: torch.Tensor | None = None,
    alignment: int = 16,
) -> torch.Tensor:
    """Chunked gated-delta-rule prefill of B ragged sequences; returns out [T, H, V] (fp32).

    q, k [T, H, K], v [T, H, V], g (log-decay) and beta [T, H]; cu_seqlens int32 [B + 1] (0, ...,
    T, non-decreasing); start_pos, state_slot, reset (0/1) int32 [B]; states [S, H, K, V];
    checkpoint_slots int32 [B, max_pages] or None, which must cover every page boundary a
    sequence passes. Raises a ``KernelContractError`` subclass before anything is written.
    """
    ct = Contract("gdn_prefill", alignment, _gdn_prefill_kernel)
    page_size = ct.param("page_size", page_size, minimum=1)
    ct.tensor("states", states, torch.float32, ("S", "H", "K", "V"), pooled=True)
    ct.tensor("q", q, torch.float32, ("T", "H", "K"))
    ct.tensor("k", k, torch.float32, ("T", "H", "K"))
    ct.tensor("v", v, torch.float32, ("T", "H", "V"))
    ct.tensor("g", g, torch.float32, ("T", "H"))
    ct.tensor("beta", beta, torch.float32, ("T", "H"))
    ct.tensor("start_pos", start_pos, torch.int32, ("B",), index=True)
    ct.tensor("state_slot", state_slot, torch.int32, ("B",), index=True)
    ct.tensor("reset", reset, torch.int32, ("B",), index=True)
    ct.tensor("cu_seqlens", cu_seqlens, torch.int32, ("*",), index=True)
    n_seq, n_rows, n_slots = ct.dim("B"), ct.dim("T"), ct.dim("S")
    if cu_seqlens.shape[0] != n_seq + 1:
        raise ShapeError(f"gdn_prefill: cu_seqlens: expected shape [B+1={n_seq + 1}], got [{cu_seqlens.shape[0]}]")
    _check_boundaries(cu_seqlens, n_rows)
    ct.in_range("start_pos", start_pos, 0, 2**31 - 1 - n_rows, "position")
    ct.in_range("reset", reset, 0, 2, "flag (0 or 1)")
    ct.in_range("state_slot", state_slot, 0, n_slots, "state slot")
    ct.unique("state_slot", state_slot)
    if checkpoint_slots is not None:
        ct.tensor("checkpoint_slots", checkpoint_slots, torch.int32, ("B", "max_pages"), index=True)
        ct.in_range("checkpoint_slots", checkpoint_slots, -1, n_slots, "state slot or -1")
        _check_checkpoints(ct, checkpoint_slots, state_slot, start_pos, cu_seqlens, page_size)
    named = [("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("states", states)]
    ct.disjoint(*named)
    return launch_gdn_prefill(
        q, k, v, g, beta, cu_seqlens, start_pos, state_slot, reset, states, page_size, checkpoint_slots
    )


def _check_boundaries(cu_seqlens: torch.Tensor, n_rows: int) -> None:
    cu = cu_seqlens.long()
    if int(cu[0]) != 0 or int(cu[-1]) != n_rows:
        raise IndexRangeError(
            f"gdn_prefill: cu_seqlens: expected to start at 0 and end at T={n_rows}, "
            f"got {int(cu[0])} .. {int(cu[-1])}"
        )
    bad = cu[1:] < cu[:-1]
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        raise IndexRangeError(
            f"gdn_prefill: cu_seqlens[{i + 1}]: expected a value >= cu_seqlens[{i}]={int(cu[i])}, "
            f"got {int(cu[i + 1])}"
        )


def _check_checkpoints(
    ct: Contract,
    table: torch.Tensor,
    state_slot: torch.Tensor,
    start_pos: torch.Tensor,
    cu_seqlens: torch.Tensor,
    page_size: int,
) -> None:
    """Every boundary passed has a column; checkpoint slots are distinct and never a working slot."""
    ends = start_pos.long() + (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    need = ends // page_size
    short = need > table.shape[1]
    if bool(short.any()):
        n = int(torch.nonzero(short)[0])
        raise IndexRangeError(
            f"gdn_prefill: checkpoint_slots[{n}]: expected >= {int(need[n])} columns (boundaries up to position "
            f"{int(ends[n])}), got {table.shape[1]}"
        )
    saved = table[table >= 0]
    both = torch.cat([state_slot.long(), saved.long()])
    ct.unique("checkpoint_slots and state_slot", both)
