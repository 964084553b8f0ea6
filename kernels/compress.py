"""compress: build the compressed entry and indexer key of complete pages.

For one complete page (raw_k/raw_v[page] hold its C tokens), per kv head g and channel d::

    w[i]  = softmax_i( raw_k[page, i, g, d] + pool_bias[i, g, d] )      i = 0..C-1
    comp_k[page, g, d] = sum_i w[i] * raw_k[page, i, g, d]
    comp_v[page, g, d] = sum_i w[i] * raw_v[page, i, g, d]
    idx_k[page, d]     = mean_g comp_k[page, g, d]

State: overwrites ``comp_k``, ``comp_v`` and ``idx_k`` at the given page ids; the raw pools are
only read.  ``gen_table`` is not touched.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._contract import Contract, next_pow2


def reference_compress(
    page_ids: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
    pool_bias: torch.Tensor,
    comp_k: torch.Tensor,
    comp_v: torch.Tensor,
    idx_k: torch.Tensor,
) -> None:
    """Plain-torch ``compress`` of pages ``page_ids`` (see the module docstring)."""
    pages = page_ids.long()
    k = raw_k[pages]  # [M, C, Hkv, D]
    v = raw_v[pages]
    w = torch.softmax(k + pool_bias[None], dim=1)
    ck = (w * k).sum(dim=1)
    comp_k[pages] = ck
    comp_v[pages] = (w * v).sum(dim=1)
    idx_k[pages] = ck.mean(dim=1)


@triton.jit
def _compress_kernel(
    page_ids_ptr, raw_k_ptr, raw_v_ptr, bias_ptr, comp_k_ptr, comp_v_ptr, idx_k_ptr,
    C: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr,
):
    page = tl.load(page_ids_ptr + tl.program_id(0)).to(tl.int64)
    offs_i = tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_i < C
    col_ok = offs_d < D
    mask = row_ok[:, None] & col_ok[None, :]
    tok = offs_i[:, None] * (HKV * D) + offs_d[None, :]
    raw_base = page * (C * HKV * D)
    ik = tl.zeros([BLOCK_D], dtype=tl.float32)
    for g in tl.static_range(HKV):
        k = tl.load(raw_k_ptr + raw_base + g * D + tok, mask=mask, other=0.0)
        v = tl.load(raw_v_ptr + raw_base + g * D + tok, mask=mask, other=0.0)
        bias = tl.load(bias_ptr + g * D + tok, mask=mask, other=0.0)
        logits = tl.where(row_ok[:, None], k + bias, float("-inf"))
        e = tl.exp(logits - tl.max(logits, axis=0)[None, :])
        w = e / tl.sum(e, axis=0)[None, :]
        ck = tl.sum(w * k, axis=0)
        cv = tl.sum(w * v, axis=0)
        comp_off = page * (HKV * D) + g * D + offs_d
        tl.store(comp_k_ptr + comp_off, ck, mask=col_ok)
        tl.store(comp_v_ptr + comp_off, cv, mask=col_ok)
        ik += ck
    tl.store(idx_k_ptr + page * D + offs_d, ik / HKV, mask=col_ok)


def launch_compress(
    page_ids: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
    pool_bias: torch.Tensor,
    comp_k: torch.Tensor,
    comp_v: torch.Tensor,
    idx_k: torch.Tensor,
) -> None:
    """Launch the compress kernel without contract checks (arguments already validated)."""
    m = page_ids.shape[0]
    if m == 0:
        return
    _, c, hkv, d = raw_k.shape
    _compress_kernel[(m,)](
        page_ids, raw_k, raw_v, pool_bias, comp_k, comp_v, idx_k,
        C=c, HKV=hkv, D=d, BLOCK_C=next_pow2(c), BLOCK_D=next_pow2(d),
    )


def compress(
    page_ids: torch.Tensor,
    raw_k: torch.Tensor,
    raw_v: torch.Tensor,
    pool_bias: torch.Tensor,
    comp_k: torch.Tensor,
    comp_v: torch.Tensor,
    idx_k: torch.Tensor,
    *,
    alignment: int = 16,
) -> None:
    """Compress the complete pages ``page_ids`` (int32/int64 [M]) into comp_k/comp_v/idx_k.

    raw_k/raw_v [P, C, Hkv, D], pool_bias [C, Hkv, D], comp_k/comp_v [P, Hkv, D], idx_k [P, D],
    all fp32.  Page ids must lie in [0, P).  Raises a ``KernelContractError`` subclass on any
    contract violation, before anything is written.
    """
    ct = Contract("compress", alignment, _compress_kernel)
    ct.tensor("raw_k", raw_k, torch.float32, ("P", "C", "Hkv", "D"), pooled=True)
    ct.tensor("raw_v", raw_v, torch.float32, ("P", "C", "Hkv", "D"), pooled=True)
    ct.tensor("pool_bias", pool_bias, torch.float32, ("C", "Hkv", "D"))
    ct.tensor("comp_k", comp_k, torch.float32, ("P", "Hkv", "D"), pooled=True)
    ct.tensor("comp_v", comp_v, torch.float32, ("P", "Hkv", "D"), pooled=True)
    ct.tensor("idx_k", idx_k, torch.float32, ("P", "D"), pooled=True)
    ct.tensor("page_ids", page_ids, (torch.int32, torch.int64), ("M",), index=True)
    ct.disjoint(
        ("raw_k", raw_k), ("raw_v", raw_v), ("pool_bias", pool_bias), ("comp_k", comp_k),
        ("comp_v", comp_v), ("idx_k", idx_k), ("page_ids", page_ids),
    )
    ct.in_range("page_ids", page_ids, 0, ct.dim("P"), "page id")
    launch_compress(page_ids, raw_k, raw_v, pool_bias, comp_k, comp_v, idx_k)
