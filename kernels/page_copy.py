"""page_copy: move whole pages between a pool and a contiguous staging buffer.

The data path of offload (gather, then copy staging to host) and prefetch (copy host to staging,
then scatter)::

    pool     [P, ...]   page 0 | page 1 | page 2 | page 3 | page 4 | ...
    page_ids [M]        [ 3, 0, 4 ]
                            |  |  |
    staging  [M, ...]   page 3 | page 0 | page 4         (gather: pool -> staging,
                                                          scatter: staging -> pool)

Any pool of the layer works (raw_k [P, C, Hkv, D], comp_k [P, Hkv, D], idx_k [P, D], ...), any
dtype.  State: ``gather_pages`` writes only the staging buffer; ``scatter_pages`` overwrites the
pool at ``page_ids`` (unique) and nothing else.  Neither touches ``gen_table``: the runtime
decides which generation a prefetched page carries.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._contract import Contract, next_pow2
from .errors import ShapeError


def reference_gather_pages(pool: torch.Tensor, page_ids: torch.Tensor) -> torch.Tensor:
    """Plain-torch gather: pool[page_ids] as a new contiguous [M, ...] tensor."""
    return pool[page_ids.long()].contiguous()


def reference_scatter_pages(staging: torch.Tensor, pool: torch.Tensor, page_ids: torch.Tensor) -> None:
    """Plain-torch scatter: pool[page_ids[i]] = staging[i]."""
    pool[page_ids.long()] = staging


@triton.jit
def _copy_pages_kernel(src_ptr, dst_ptr, page_ids_ptr, PAGE: tl.constexpr, BLOCK: tl.constexpr,
                       GATHER: tl.constexpr):
    i = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < PAGE
    page = tl.load(page_ids_ptr + i).to(tl.int64)
    staged = i.to(tl.int64) * PAGE + offs
    pooled = page * PAGE + offs
    if GATHER:
        tl.store(dst_ptr + staged, tl.load(src_ptr + pooled, mask=mask), mask=mask)
    else:
        tl.store(dst_ptr + pooled, tl.load(src_ptr + staged, mask=mask), mask=mask)


def _launch_copy(src: torch.Tensor, dst: torch.Tensor, page_ids: torch.Tensor, gather: bool) -> None:
    m = page_ids.shape[0]
    pool = src if gather else dst
    page = pool[0].numel() if pool.shape[0] else 0
    if m == 0 or page == 0:
        return
    block = min(next_pow2(page), 1024)
    grid = (m, triton.cdiv(page, block))
    _copy_pages_kernel[grid](src, dst, page_ids, PAGE=page, BLOCK=block, GATHER=gather)


def launch_gather_pages(pool: torch.Tensor, page_ids: torch.Tensor, out: torch.Tensor) -> None:
    """Gather without contract checks (arguments already validated)."""
    _launch_copy(pool, out, page_ids, gather=True)


def launch_scatter_pages(staging: torch.Tensor, pool: torch.Tensor, page_ids: torch.Tensor) -> None:
    """Scatter without contract checks (arguments already validated)."""
    _launch_copy(staging, pool, page_ids, gather=False)


def _check_common(ct: Contract, pool: object, page_ids: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Check pool [P, ...] (any dtype) and page_ids int32/int64 [M] with ids in [0, P)."""
    if isinstance(pool, torch.Tensor) and pool.dim() == 0:
        raise ShapeError(f"{ct.op}: pool: expected a tensor [P, ...], got a 0-d tensor")
    if isinstance(pool, torch.Tensor):
        pool = ct.tensor("pool", pool, pool.dtype, ["P", *pool.shape[1:]], pooled=True)
    else:
        pool = ct.tensor("pool", pool, torch.float32)
    ids = ct.tensor("page_ids", page_ids, (torch.int32, torch.int64), ("M",), index=True)
    ct.in_range("page_ids", ids, 0, ct.dim("P"), "page id")
    return pool, ids


def gather_pages(
    pool: torch.Tensor,
    page_ids: torch.Tensor,
    out: torch.Tensor | None = None,
    *,
    alignment: int = 16,
) -> torch.Tensor:
    """Copy pool[page_ids] (pool [P, ...], page_ids int32/int64 [M]) into a staging [M, ...] buffer.

    Writes into ``out`` when given (same dtype and device, contiguous, disjoint from the pool),
    otherwise into a new tensor; returns the staging buffer.
    """
    ct = Contract("gather_pages", alignment, _copy_pages_kernel)
    pool, ids = _check_common(ct, pool, page_ids)
    if out is None:
        out = torch.empty((ids.shape[0], *pool.shape[1:]), dtype=pool.dtype, device=pool.device)
    ct.tensor("out", out, pool.dtype, ["M", *pool.shape[1:]])
    ct.disjoint(("pool", pool), ("out", out), ("page_ids", ids))
    launch_gather_pages(pool, ids, out)
    return out


def scatter_pages(
    staging: torch.Tensor,
    pool: torch.Tensor,
    page_ids: torch.Tensor,
    *,
    alignment: int = 16,
) -> None:
    """Copy staging[i] into pool[page_ids[i]] for every i (page ids unique, in [0, P))."""
    ct = Contract("scatter_pages", alignment, _copy_pages_kernel)
    pool, ids = _check_common(ct, pool, page_ids)
    ct.unique("page_ids", ids)
    ct.tensor("staging", staging, pool.dtype, ["M", *pool.shape[1:]])
    ct.disjoint(("pool", pool), ("staging", staging), ("page_ids", ids))
    launch_scatter_pages(staging, pool, ids)
