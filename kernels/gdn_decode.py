"""gdn_decode: one gated-delta-rule step per sequence, in place on its state slot.

Row n is the next token of the sequence whose working state is states[state_slot[n]]::

    S <- exp(g[n]) * S
    S <- S + k[n] (beta[n] * (v[n] - S^T k[n]))^T
    out[n] = S^T q[n]
    states[state_slot[n]] <- S            (and states[save_slot[n]] <- S if save_slot[n] >= 0:
                                            a checkpoint when the token completes a page)

Columns of S evolve independently, so programs split V into BLOCK_V-wide blocks.

State: writes out, the state slots and the save slots. No lease (a working state is its own
sequence's; see ``gdn_restore`` for reading a shared checkpoint).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._contract import Contract, next_pow2
from ._delta import delta_step


def reference_gdn_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state_slot: torch.Tensor,
    states: torch.Tensor,
    save_slot: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain-torch ``gdn_decode``: returns out [N, H, V], updates states."""
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=v.dtype, device=v.device)
    for n in range(q.shape[0]):
        slot = int(state_slot[n])
        out[n], states[slot] = delta_step(states[slot], q[n], k[n], v[n], g[n], beta[n])
        if save_slot is not None and int(save_slot[n]) >= 0:
            states[int(save_slot[n])] = states[slot]
    return out


@triton.jit
def _gdn_decode_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_slot_ptr, save_ptr, states_ptr, out_ptr,
    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, SAVE: tl.constexpr,
):
    n = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    vb = tl.program_id(2)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = vb * BLOCK_V + tl.arange(0, BLOCK_V)
    k_ok = offs_k < K
    v_ok = offs_v < V
    s_mask = k_ok[:, None] & v_ok[None, :]
    s_tile = h * (K * V) + offs_k[:, None] * V + offs_v[None, :]
    slot = tl.load(state_slot_ptr + n).to(tl.int64)
    s = tl.load(states_ptr + slot * (H * K * V) + s_tile, mask=s_mask, other=0.0)
    q = tl.load(q_ptr + n * (H * K) + h * K + offs_k, mask=k_ok, other=0.0)
    k = tl.load(k_ptr + n * (H * K) + h * K + offs_k, mask=k_ok, other=0.0)
    v = tl.load(v_ptr + n * (H * V) + h * V + offs_v, mask=v_ok, other=0.0)
    g = tl.load(g_ptr + n * H + h)
    beta = tl.load(beta_ptr + n * H + h)
    s = tl.exp(g) * s
    predicted = tl.sum(s * k[:, None], axis=0)
    s = s + k[:, None] * (beta * (v - predicted))[None, :]
    o = tl.sum(s * q[:, None], axis=0)
    tl.store(out_ptr + n * (H * V) + h * V + offs_v, o, mask=v_ok)
    tl.store(states_ptr + slot * (H * K * V) + s_tile, s, mask=s_mask)
    if SAVE:
        saved = tl.load(save_ptr + n).to(tl.int64)
        keep = (tl.zeros([BLOCK_K, BLOCK_V], dtype=tl.int64) + saved) >= 0
        tl.store(states_ptr + saved * (H * K * V) + s_tile, s, mask=s_mask & keep)


def launch_gdn_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state_slot: torch.Tensor,
    states: torch.Tensor,
    save_slot: torch.Tensor | None = None,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Launch without contract checks (arguments already validated); returns out [N, H, V]."""
    n, h, dk = q.shape
    dv = v.shape[2]
    out = torch.empty(n, h, dv, dtype=v.dtype, device=v.device) if out is None else out
    if n == 0:
        return out
    block_v = min(next_pow2(dv), 64)
    _gdn_decode_kernel[(n, h, triton.cdiv(dv, block_v))](
        q, k, v, g, beta, state_slot, save_slot if save_slot is not None else state_slot, states, out,
        H=h, K=dk, V=dv, BLOCK_K=next_pow2(dk), BLOCK_V=block_v, SAVE=save_slot is not None,
    )
    return out


def gdn_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state_slot: torch.Tensor,
    states: torch.Tensor,
    *,
    save_slot: torch.Tensor | None = None,
    alignment: int = 16,
) -> torch.Tensor:
    """One decode step for N sequences; returns out [N, H, V] (fp32), updates their state slots.

    q, k [N, H, K], v [N, H, V], g and beta [N, H]; state_slot int32 [N] (distinct);
    states [S, H, K, V]; save_slot int32 [N] (-1: none) or None: distinct slots, never a working
    slot. Raises a ``KernelContractError`` subclass before anything is written.
    """
    ct = Contract("gdn_decode", alignment, _gdn_decode_kernel)
    ct.tensor("states", states, torch.float32, ("S", "H", "K", "V"), pooled=True)
    ct.tensor("q", q, torch.float32, ("N", "H", "K"))
    ct.tensor("k", k, torch.float32, ("N", "H", "K"))
    ct.tensor("v", v, torch.float32, ("N", "H", "V"))
    ct.tensor("g", g, torch.float32, ("N", "H"))
    ct.tensor("beta", beta, torch.float32, ("N", "H"))
    ct.tensor("state_slot", state_slot, torch.int32, ("N",), index=True)
    n_slots = ct.dim("S")
    ct.in_range("state_slot", state_slot, 0, n_slots, "state slot")
    ct.unique("state_slot", state_slot)
    if save_slot is not None:
        ct.tensor("save_slot", save_slot, torch.int32, ("N",), index=True)
        ct.in_range("save_slot", save_slot, -1, n_slots, "state slot or -1")
        ct.unique("save_slot and state_slot", torch.cat([state_slot, save_slot[save_slot >= 0]]))
    ct.disjoint(("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("states", states))
    return launch_gdn_decode(q, k, v, g, beta, state_slot, states, save_slot)
