"""The runtime's ``KernelLease``: what the read kernels accept, built from live runtime leases.

One row per lease::

    block_table[b]        GPU slots of the pinned pages (block order; a sequence's own partial last
                          page last), -1 padded
    lease_generations[b]  the generation of each page when the lease was taken (the kernels compare
                          it with the device-side gen_table the page store publishes)
    seq_lens[b]           tokens covered by the row

``check_live`` re-validates every lease through the manager's public ``read`` (spec ``read`` on each
pinned page).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from morphcache.kernels.lease import KernelLease

from .lease import Lease

if TYPE_CHECKING:
    from .manager import CacheManager


class RuntimeKernelLease(KernelLease):
    """A batch of runtime leases in the tensor form the read kernels take."""

    def __init__(self, manager: CacheManager, leases: list[Lease], slots: list[list[int]], gens: list[list[int]],
                 lens: list[int], device: Any = "cpu") -> None:
        self.manager = manager
        self.leases = leases
        width = max((len(r) for r in slots), default=0) or 1
        table = torch.full((len(slots), width), -1, dtype=torch.int32)
        gtab = torch.zeros((len(slots), width), dtype=torch.int32)
        for i, (r, g) in enumerate(zip(slots, gens, strict=True)):
            if r:
                table[i, : len(r)] = torch.tensor(r, dtype=torch.int32)
                gtab[i, : len(g)] = torch.tensor(g, dtype=torch.int32)
        self.block_table = table.to(device)
        self.lease_generations = gtab.to(device)
        self.seq_lens = torch.tensor(lens, dtype=torch.int32).to(device)

    def check_live(self) -> None:
        """Raise (LeaseReleasedError, StaleLeaseError ...) unless every lease re-validates now."""
        for lease in self.leases:
            self.manager.read(lease)
