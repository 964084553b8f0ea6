"""store: write the raw K/V of new tokens into the raw page pools.

::

    raw_k [P, C, Hkv, D] seen as rows [P*C, Hkv*D]:   slot = page * C + offset

    token n:  k[n] (Hkv*D values) --slot_mapping[n]--> raw_k row slot_mapping[n]
              slot_mapping[n] < 0  ->  token skipped (padding)

State: overwrites ``raw_k``/``raw_v`` at the mapped slots, nothing else.  ``gen_table`` is not
touched (the runtime bumps generations when it rewrites a page).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._contract import Contract, next_pow2


def reference_store(
    k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor, raw_k: torch.Tensor, raw_v: torch.Tensor
) -> None:
    """Plain-torch ``store``: raw_k/raw_v[slot // C, slot % C] = k/v[n] for every slot >= 0."""
    c = raw_k.shape[1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    raw_k[slots // c, slots % c] = k[keep]
    raw_v[slots // c, slots % c] = v[keep]


@triton.jit
def _store_kernel(
    k_ptr, v_ptr, slot_ptr, raw_k_ptr, raw_v_ptr, N,
    HD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_HD: tl.constexpr,
):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_e = tl.arange(0, BLOCK_HD)
    in_n = offs_n < N
    slot = tl.load(slot_ptr + offs_n, mask=in_n, other=-1).to(tl.int64)
    row_ok = in_n & (slot >= 0)
    mask = row_ok[:, None] & (offs_e[None, :] < HD)
    src = offs_n.to(tl.int64)[:, None] * HD + offs_e[None, :]
    dst = slot[:, None] * HD + offs_e[None, :]
    tl.store(raw_k_ptr + dst, tl.load(k_ptr + src, mask=mask), mask=mask)
    tl.store(raw_v_ptr + dst, tl.load(v_ptr + src, mask=mask), mask=mask)


def launch_store(
    k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor, raw_k: torch.Tensor, raw_v: torch.Tensor
) -> None:
    """Launch the store kernel without contract checks (arguments already validated)."""
    n = k.shape[0]
    if n == 0:
        return
    hd = raw_k.shape[2] * raw_k.shape[3]
    block_hd = next_pow2(hd)
    block_n = max(1, min(next_pow2(n), 4096 // block_hd, 64))
    grid = (triton.cdiv(n, block_n),)
    _store_kernel[grid](k, v, slot_mapping, raw_k, raw_v, n, HD=hd, BLOCK_N=block_n, BLOCK_HD=block_hd)


def store(
    k: torch.Tensor,
    v: torch.Tensor,
    slot_mapping: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
    *,
    alignment: int = 16,
) -> None:
    """Write k/v [N, Hkv, D] of N new tokens into raw_k/raw_v [P, C, Hkv, D] at ``slot_mapping``.

    ``slot_mapping`` int64 [N]: flat slot ``page * C + offset``, negative = skip the token.
    Non-negative slots must be < P*C and unique.  Raises a ``KernelContractError`` subclass on
    any contract violation, before anything is written.
    """
    ct = Contract("store", alignment, _store_kernel)
    ct.tensor("raw_k", raw_k, torch.float32, ("P", "C", "Hkv", "D"), pooled=True)
    ct.tensor("raw_v", raw_v, torch.float32, ("P", "C", "Hkv", "D"), pooled=True)
    ct.tensor("k", k, torch.float32, ("N", "Hkv", "D"))
    ct.tensor("v", v, torch.float32, ("N", "Hkv", "D"))
    ct.tensor("slot_mapping", slot_mapping, torch.int64, ("N",), index=True)
    ct.disjoint(("raw_k", raw_k), ("raw_v", raw_v), ("k", k), ("v", v), ("slot_mapping", slot_mapping))
    n_slots = ct.dim("P") * ct.dim("C")
    ct.in_range("slot_mapping", slot_mapping, None, n_slots, "slot (negative = skip)")
    ct.unique("slot_mapping", slot_mapping, ignore_negative=True)
    launch_store(k, v, slot_mapping, raw_k, raw_v)
