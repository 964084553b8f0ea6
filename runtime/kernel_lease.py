"""The runtime's ``KernelLease``: what the read kernels accept, built from live runtime leases.

One row per lease::

    block_table[b]        GPU slots of the leased pages (block order), then the sequence's own
                          filling page if the lease carries one, -1 padded
    lease_generations[b]  the generation of each page when the lease was taken (the kernels compare
                          it with the device-side gen_table the page store publishes)
    seq_lens[b]           tokens covered by the row

``check_live`` re-validates every lease through the manager (spec ``read`` on each page).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from morphcache.kernels.lease import KernelLease

from . import binding as B
from .lease import Lease

if TYPE_CHECKING:
    from .lookups import LookupOps


class RuntimeKernelLease(KernelLease):
    """A batch of runtime leases in the tensor form the read kernels take."""

    def __init__(self, manager: LookupOps, leases: list[Lease], block_table: torch.Tensor,
                 generations: torch.Tensor, seq_lens: torch.Tensor) -> None:
        self.manager = manager
        self.leases = leases
        self.block_table = block_table
        self.lease_generations = generations
        self.seq_lens = seq_lens

    @classmethod
    def build(cls, manager: LookupOps, leases: list[Lease], device: Any = "cpu") -> RuntimeKernelLease:
        """Rows from the leases' pages (call under the manager's lock), as tensors on ``device``."""
        rows: list[list[int]] = []
        gens: list[list[int]] = []
        lens: list[int] = []
        for lease in leases:
            pids = list(lease.pages) + ([lease.tail] if lease.tail is not None else [])
            rows.append([manager.pages.info[pid].gpu_slot for pid in pids])
            gens.append([int(manager.cols[B.GEN][pid]) for pid in pids])  # type: ignore[call-overload]
            lens.append(lease.tokens if lease.tail is not None else len(lease.pages) * manager.C)
        width = max((len(r) for r in rows), default=0) or 1
        table = torch.full((len(rows), width), -1, dtype=torch.int32)
        gtab = torch.zeros((len(rows), width), dtype=torch.int32)
        for i, (r, g) in enumerate(zip(rows, gens, strict=True)):
            if r:
                table[i, : len(r)] = torch.tensor(r, dtype=torch.int32)
                gtab[i, : len(g)] = torch.tensor(g, dtype=torch.int32)
        lens_t = torch.tensor(lens, dtype=torch.int32)
        return cls(manager, leases, table.to(device), gtab.to(device), lens_t.to(device))

    def check_live(self) -> None:
        """Raise (LeaseReleasedError, StaleLeaseError ...) unless every lease re-validates now."""
        with self.manager.lock:
            for lease in self.leases:
                self.manager._validate(self.manager._own(lease), payloads=False)
