"""The launcher interface the cached forward calls, and its three implementations.

::

    AttentionOps            writers (no lease)          readers (lease + generation guard)
    ------------            ------------------          ----------------------------------
    TritonOps               store, compress,            Triton read kernels, guard on the device
                            gdn_prefill, gdn_decode
    ReferenceOps            plain-torch references      plain-torch references, guard in torch
    UnguardedOps (unsafe)   as TritonOps                Triton read kernels with the guard compiled
                                                        out and no lease check (reads whatever is
                                                        in the pools)
    ReferenceOps(guard=False) (unsafe)                  the references, no lease check, no guard

``gdn_prefill`` / ``gdn_decode`` (linear layers) write a sequence's own working state slot, so they
are writers: no lease, as the kernels' contracts say.

Every reader takes the same arguments as the ``morphcache.kernels`` launchers, so the forward does
not know which implementation runs.  ``ReferenceOps`` exists for long prefixes on CPU, where the
Triton interpreter is too slow (benchmarks/bench_e2e.py says when it is used).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from morphcache import kernels as K
from morphcache.kernels.compressed_read import launch_compressed_read
from morphcache.kernels.indexer_topk import launch_indexer_topk
from morphcache.kernels.lease import require_live_lease
from morphcache.kernels.sparse_read import launch_sparse_read
from morphcache.kernels.window_read import launch_window_read
from morphcache.spec.model import Spec


class AttentionOps(Protocol):
    """What the cached forward needs from the kernels (signatures of ``morphcache.kernels``)."""

    name: str
    guarded: bool

    def store(self, k: Tensor, v: Tensor, slot_mapping: Tensor, raw_k: Tensor, raw_v: Tensor) -> None:
        """Write raw k/v [N, Hkv, D] at flat slots ``page * C + offset``."""

    def compress(self, page_ids: Tensor, raw_k: Tensor, raw_v: Tensor, pool_bias: Tensor,
                 comp_k: Tensor, comp_v: Tensor, idx_k: Tensor) -> None:
        """Build the compressed entries and indexer keys of complete pages."""

    def gdn_prefill(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor,
                    start_pos: Tensor, state_slot: Tensor, reset: Tensor, states: Tensor, page_size: int,
                    checkpoint_slots: Tensor | None) -> Tensor:
        """Chunked gated delta rule of ragged sequences on their state slots; out [T, H, D]."""
        ...

    def gdn_decode(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state_slot: Tensor,
                   states: Tensor, save_slot: Tensor | None) -> Tensor:
        """One gated-delta-rule step per sequence on its state slot; out [N, H, D]."""
        ...

    def compressed_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease,
                        comp_k: Tensor, comp_v: Tensor, raw_k: Tensor, raw_v: Tensor,
                        gen_table: Tensor) -> Tensor:
        """Compressed-history attention [N, Hq, D]."""
        ...

    def window_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, raw_k: Tensor,
                    raw_v: Tensor, gen_table: Tensor, window: int) -> Tensor:
        """Sliding-window attention [N, Hq, D]."""
        ...

    def indexer_topk(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, idx_k: Tensor,
                     gen_table: Tensor, k: int, page_size: int) -> Tensor:
        """Top-k block columns per query, int32 [N, k], -1 padded."""
        ...

    def sparse_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, topk: Tensor,
                    comp_k: Tensor, comp_v: Tensor, raw_k: Tensor, raw_v: Tensor,
                    gen_table: Tensor) -> Tensor:
        """Sparse-routing attention [N, Hq, D] over the selected blocks and the raw tail."""
        ...


class TritonOps:
    """The Triton kernels through their checked launchers (the production path).

    ``alignment`` is the byte alignment the launchers require of every data tensor: the strictest
    ``align`` the spec's layouts declare (``layout_alignment``), so the launch-time check and the
    checker's layout proofs read the same number.
    """

    name = "triton"
    guarded = True

    def __init__(self, alignment: int = 16) -> None:
        self.alignment = alignment

    def store(self, k: Tensor, v: Tensor, slot_mapping: Tensor, raw_k: Tensor, raw_v: Tensor) -> None:
        K.store(k, v, slot_mapping, raw_k, raw_v, alignment=self.alignment)

    def compress(self, page_ids: Tensor, raw_k: Tensor, raw_v: Tensor, pool_bias: Tensor,
                 comp_k: Tensor, comp_v: Tensor, idx_k: Tensor) -> None:
        K.compress(page_ids, raw_k, raw_v, pool_bias, comp_k, comp_v, idx_k, alignment=self.alignment)

    def gdn_prefill(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor,
                    start_pos: Tensor, state_slot: Tensor, reset: Tensor, states: Tensor, page_size: int,
                    checkpoint_slots: Tensor | None) -> Tensor:
        return K.gdn_prefill(q, k, v, g, beta, cu_seqlens, start_pos, state_slot, reset, states,
                             page_size=page_size, checkpoint_slots=checkpoint_slots, alignment=self.alignment)

    def gdn_decode(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state_slot: Tensor,
                   states: Tensor, save_slot: Tensor | None) -> Tensor:
        return K.gdn_decode(q, k, v, g, beta, state_slot, states, save_slot=save_slot, alignment=self.alignment)

    def compressed_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease,
                        comp_k: Tensor, comp_v: Tensor, raw_k: Tensor, raw_v: Tensor,
                        gen_table: Tensor) -> Tensor:
        return K.compressed_read(q, q_seq, q_pos, lease, comp_k, comp_v, raw_k, raw_v, gen_table,
                                 alignment=self.alignment)

    def window_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, raw_k: Tensor,
                    raw_v: Tensor, gen_table: Tensor, window: int) -> Tensor:
        return K.window_read(q, q_seq, q_pos, lease, raw_k, raw_v, gen_table, window, alignment=self.alignment)

    def indexer_topk(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, idx_k: Tensor,
                     gen_table: Tensor, k: int, page_size: int) -> Tensor:
        return K.indexer_topk(q, q_seq, q_pos, lease, idx_k, gen_table, k, page_size=page_size,
                              alignment=self.alignment)

    def sparse_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, topk: Tensor,
                    comp_k: Tensor, comp_v: Tensor, raw_k: Tensor, raw_v: Tensor,
                    gen_table: Tensor) -> Tensor:
        return K.sparse_read(q, q_seq, q_pos, lease, topk, comp_k, comp_v, raw_k, raw_v, gen_table,
                             alignment=self.alignment)


def _guard(op: str, lease: K.KernelLease, q_seq: Tensor, touched: Tensor, gen_table: Tensor) -> None:
    """The generation guard in torch: raise StaleReadError for rows reading a page whose
    ``gen_table`` entry moved since the lease recorded it.  ``touched`` [N, max_pages] bool."""
    rows = q_seq.long()
    pages = lease.block_table[rows].long()
    live = gen_table[pages.clamp(min=0)]
    stale = touched & (pages >= 0) & (live != lease.lease_generations[rows])
    bad = stale.any(dim=1)
    if bool(bad.any()):
        raise K.StaleReadError(op, sorted(set(q_seq[bad].tolist())))


def _span(q_pos: Tensor, width: int, first: Tensor, last: Tensor) -> Tensor:
    b = torch.arange(width, device=q_pos.device)[None, :]
    return (b >= first[:, None]) & (b <= last[:, None])


class ReferenceOps:
    """The plain-torch references behind the same interface: lease checked, guard in torch
    (``guard=False``: neither, for the unsafe mode)."""

    def __init__(self, guard: bool = True) -> None:
        self.guarded = guard
        self.name = "reference" if guard else "reference-unguarded"

    def store(self, k: Tensor, v: Tensor, slot_mapping: Tensor, raw_k: Tensor, raw_v: Tensor) -> None:
        K.reference_store(k, v, slot_mapping, raw_k, raw_v)

    def compress(self, page_ids: Tensor, raw_k: Tensor, raw_v: Tensor, pool_bias: Tensor,
                 comp_k: Tensor, comp_v: Tensor, idx_k: Tensor) -> None:
        K.reference_compress(page_ids, raw_k, raw_v, pool_bias, comp_k, comp_v, idx_k)

    def gdn_prefill(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, cu_seqlens: Tensor,
                    start_pos: Tensor, state_slot: Tensor, reset: Tensor, states: Tensor, page_size: int,
                    checkpoint_slots: Tensor | None) -> Tensor:
        return K.reference_gdn_prefill(q, k, v, g, beta, cu_seqlens, start_pos, state_slot, reset, states,
                                       page_size, checkpoint_slots)

    def gdn_decode(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state_slot: Tensor,
                   states: Tensor, save_slot: Tensor | None) -> Tensor:
        return K.reference_gdn_decode(q, k, v, g, beta, state_slot, states, save_slot)

    def compressed_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease,
                        comp_k: Tensor, comp_v: Tensor, raw_k: Tensor, raw_v: Tensor,
                        gen_table: Tensor) -> Tensor:
        if self.guarded:
            require_live_lease(lease, "compressed_read")
            c = raw_k.shape[1]
            bt = (q_pos // c).long()
            width = lease.block_table.shape[1]
            _guard("compressed_read", lease, q_seq, _span(q_pos, width, torch.zeros_like(bt), bt), gen_table)
        return K.reference_compressed_read(q, q_seq, q_pos, lease.block_table, comp_k, comp_v, raw_k, raw_v)

    def window_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, raw_k: Tensor,
                    raw_v: Tensor, gen_table: Tensor, window: int) -> Tensor:
        if self.guarded:
            require_live_lease(lease, "window_read")
            c = raw_k.shape[1]
            first = ((q_pos - window + 1).clamp(min=0) // c).long()
            width = lease.block_table.shape[1]
            _guard("window_read", lease, q_seq, _span(q_pos, width, first, (q_pos // c).long()), gen_table)
        return K.reference_window_read(q, q_seq, q_pos, lease.block_table, raw_k, raw_v, window)

    def indexer_topk(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, idx_k: Tensor,
                     gen_table: Tensor, k: int, page_size: int) -> Tensor:
        if self.guarded:
            require_live_lease(lease, "indexer_topk")
            bt = (q_pos // page_size).long()
            width = lease.block_table.shape[1]
            _guard("indexer_topk", lease, q_seq, _span(q_pos, width, torch.zeros_like(bt), bt - 1), gen_table)
        return K.reference_indexer_topk(q, q_seq, q_pos, lease.block_table, idx_k, k, page_size)

    def sparse_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, topk: Tensor,
                    comp_k: Tensor, comp_v: Tensor, raw_k: Tensor, raw_v: Tensor,
                    gen_table: Tensor) -> Tensor:
        if self.guarded:
            require_live_lease(lease, "sparse_read")
            c = raw_k.shape[1]
            bt = (q_pos // c).long()
            touched = _span(q_pos, lease.block_table.shape[1], bt, bt)
            rows = torch.arange(topk.shape[0], device=topk.device)[:, None].expand_as(topk)
            sel = topk >= 0
            touched[rows[sel], topk[sel].long()] = True
            _guard("sparse_read", lease, q_seq, touched, gen_table)
        return K.reference_sparse_read(q, q_seq, q_pos, lease.block_table, topk, comp_k, comp_v, raw_k, raw_v)


class UnguardedOps(TritonOps):
    """The unsafe mode's readers: no lease check, the device generation guard compiled out."""

    name = "triton-unguarded"
    guarded = False

    def compressed_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease,
                        comp_k: Tensor, comp_v: Tensor, raw_k: Tensor, raw_v: Tensor,
                        gen_table: Tensor) -> Tensor:
        out, _ = launch_compressed_read(q, q_seq, q_pos, lease.block_table, lease.lease_generations, gen_table,
                                        comp_k, comp_v, raw_k, raw_v, guard=False)
        return out

    def window_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, raw_k: Tensor,
                    raw_v: Tensor, gen_table: Tensor, window: int) -> Tensor:
        out, _ = launch_window_read(q, q_seq, q_pos, lease.block_table, lease.lease_generations, gen_table,
                                    raw_k, raw_v, window, guard=False)
        return out

    def indexer_topk(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, idx_k: Tensor,
                     gen_table: Tensor, k: int, page_size: int) -> Tensor:
        out, _ = launch_indexer_topk(q, q_seq, q_pos, lease.block_table, lease.lease_generations, gen_table,
                                     idx_k, k, page_size, guard=False)
        return out

    def sparse_read(self, q: Tensor, q_seq: Tensor, q_pos: Tensor, lease: K.KernelLease, topk: Tensor,
                    comp_k: Tensor, comp_v: Tensor, raw_k: Tensor, raw_v: Tensor,
                    gen_table: Tensor) -> Tensor:
        out, _ = launch_sparse_read(q, q_seq, q_pos, lease.block_table, lease.lease_generations, gen_table,
                                    topk, comp_k, comp_v, raw_k, raw_v, guard=False)
        return out


KERNEL_LAYOUTS = ("raw_k", "compressed_k", "indexer_k")


def layout_alignment(spec: Spec) -> int:
    """The strictest alignment the spec declares for the pools the kernels read (16 if none)."""
    return max((lay.align for lay in spec.layouts if lay.name in KERNEL_LAYOUTS), default=16)


def make_ops(name: str, *, guarded: bool = True, alignment: int = 16) -> AttentionOps:
    """``"triton"`` or ``"reference"``; ``guarded=False`` gives the unsafe mode's readers (no lease
    check, no generation guard); ``alignment`` is passed to the Triton launchers."""
    if name == "triton":
        return TritonOps(alignment) if guarded else UnguardedOps(alignment)
    if name == "reference":
        return ReferenceOps(guard=guarded)
    raise ValueError(f"unknown ops {name!r}; expected triton or reference")
