"""gdn_restore: copy a recurrent-state checkpoint into a sequence's working state slot, under a lease.

A checkpoint is the state of every head of one linear layer after a page boundary. The lease's
block table maps (row, block b) to the slot of the checkpoint taken after block b, i.e. at
position (b + 1) * C::

    C = 4                    positions 0..3 | 4..7 | 8..11
    lease.block_table[row]   [ 12,           -1,    30 ]      checkpoints after pages 0 and 2
    restore(row, block=2)    states[dst] <- states[30]        the state at position 12

The kernel re-checks the checkpoint slot's generation against the lease (as the page reads do):
a stale checkpoint is not copied, its row is flagged and the launcher raises ``StaleReadError``.

State: writes only states[state_slot[n]] (and error flags).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._contract import Contract, next_pow2, raise_if_stale
from .errors import DuplicateIndexError, IndexRangeError
from .lease import KernelLease, require_live_lease


def reference_gdn_restore(
    rows: torch.Tensor, blocks: torch.Tensor, state_slot: torch.Tensor, block_table: torch.Tensor, states: torch.Tensor
) -> None:
    """Plain-torch ``gdn_restore`` (no generation guard)."""
    for n in range(rows.shape[0]):
        src = int(block_table[int(rows[n]), int(blocks[n])])
        states[int(state_slot[n])] = states[src]


@triton.jit
def _gdn_restore_kernel(
    rows_ptr, blocks_ptr, state_slot_ptr, bt_ptr, lg_ptr, gen_ptr, states_ptr, err_ptr, max_pages,
    HKV: tl.constexpr, BLOCK: tl.constexpr, GUARD: tl.constexpr,
):
    n = tl.program_id(0)
    part = tl.program_id(1)
    row = tl.load(rows_ptr + n).to(tl.int64)
    blk = tl.load(blocks_ptr + n)
    src = tl.load(bt_ptr + row * max_pages + blk).to(tl.int64)
    dst = tl.load(state_slot_ptr + n).to(tl.int64)
    fresh = src >= 0
    if GUARD:
        lease_gen = tl.load(lg_ptr + row * max_pages + blk)
        fresh = fresh & (tl.load(gen_ptr + src) == lease_gen)
        tl.store(err_ptr + row, 1, mask=(fresh == 0) & (part == 0))
    offs = part * BLOCK + tl.arange(0, BLOCK)
    ok = (offs < HKV) & ((tl.zeros([BLOCK], dtype=tl.int32) + fresh.to(tl.int32)) > 0)
    tl.store(states_ptr + dst * HKV + offs, tl.load(states_ptr + src * HKV + offs, mask=ok), mask=ok)


def gdn_restore(
    rows: torch.Tensor,
    blocks: torch.Tensor,
    state_slot: torch.Tensor,
    lease: KernelLease,
    states: torch.Tensor,
    gen_table: torch.Tensor,
    *,
    page_size: int,
    alignment: int = 16,
) -> None:
    """states[state_slot[n]] <- the checkpoint of lease row rows[n] after block blocks[n].

    rows, blocks, state_slot int32 [N]; states [S, H, K, V]; gen_table int32 [S]. The lease must
    cover the checkpoint's position ((block + 1) * page_size <= lease.seq_lens[row]) and name a slot
    there; destination slots are distinct and never a checkpoint being read. Raises a
    ``KernelContractError`` subclass before launch, ``StaleReadError`` after it.
    """
    lease = require_live_lease(lease, "gdn_restore")
    ct = Contract("gdn_restore", alignment, _gdn_restore_kernel)
    page_size = ct.param("page_size", page_size, minimum=1)
    ct.tensor("states", states, torch.float32, ("S", "H", "K", "V"), pooled=True)
    ct.tensor("gen_table", gen_table, torch.int32, ("S",), index=True)
    block_table, lease_gens, seq_lens = ct.lease(lease)
    ct.tensor("rows", rows, torch.int32, ("N",), index=True)
    ct.tensor("blocks", blocks, torch.int32, ("N",), index=True)
    ct.tensor("state_slot", state_slot, torch.int32, ("N",), index=True)
    n_slots, max_pages = ct.dim("S"), ct.dim("max_pages")
    ct.in_range("rows", rows, 0, ct.dim("B"), "block-table row")
    ct.in_range("blocks", blocks, 0, max_pages, "block-table column")
    ct.in_range("state_slot", state_slot, 0, n_slots, "state slot")
    ct.unique("state_slot", state_slot)
    if rows.numel() == 0:
        return
    covered = (blocks.long() + 1) * page_size <= seq_lens[rows.long()].long()
    if not bool(covered.all()):
        n = int(torch.nonzero(~covered)[0])
        raise IndexRangeError(
            f"gdn_restore: blocks[{n}]: expected a checkpoint inside the lease (position <= "
            f"lease.seq_lens[{int(rows[n])}]={int(seq_lens[rows[n]])}), got position {(int(blocks[n]) + 1) * page_size}"
        )
    sources = block_table[rows.long(), blocks.long()]
    ct.in_range("lease.block_table[rows, blocks]", sources, 0, n_slots, "state slot")
    clash = torch.isin(state_slot, sources)
    if bool(clash.any()):
        n = int(torch.nonzero(clash)[0])
        raise DuplicateIndexError(
            f"gdn_restore: state_slot[{n}]: expected a slot no checkpoint is read from, got {int(state_slot[n])}"
        )
    err = torch.zeros(block_table.shape[0], dtype=torch.int32, device=states.device)
    per_slot = states[0].numel() if states.shape[0] else 0
    block = min(next_pow2(per_slot), 1024)
    _gdn_restore_kernel[(rows.shape[0], triton.cdiv(per_slot, block))](
        rows, blocks, state_slot, block_table, lease_gens, gen_table, states, err, max_pages,
        HKV=per_slot, BLOCK=block, GUARD=True,
    )
    raise_if_stale("gdn_restore", err)
