"""The ``KernelLease`` a sequence's forward reads under.

A forward reads two kinds of pages of its own sequence::

    blocks         0 ..................... k-1 | k ........................ n-1
    pages          readable, pinned by a         written by this forward: sealed but not yet
                   runtime lease (shared prefix   compressed, or still filling; held by the
                   and earlier chunks)            sequence alone, not readable to anyone else
    check_live     the runtime's own lease        still on the GPU, same slot, same generation,
                   check (spec ``read`` on         still held by the sequence (read again only
                   every pinned page)              when the manager's ``version`` moved)

``block_table`` / ``lease_generations`` hold every block's slot and generation as the runtime
states them at build time; the read kernels compare the generations with the device
``gen_table`` on every page they touch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from morphcache.kernels import KernelLease
from morphcache.runtime import CacheManager, Lease, StaleLeaseError


class SequenceLease(KernelLease):
    """Row 0 = every page of ``seq_id``; pinned pages re-validated by the runtime, own pages by state."""

    def __init__(self, manager: CacheManager, seq_id: str, runtime_lease: Lease | None,
                 device: torch.device) -> None:
        self.manager = manager
        self.seq_id = seq_id
        self.pages = manager.sequence_pages(seq_id)
        pinned = set(runtime_lease.pages) if runtime_lease is not None else set()
        now = manager.page_values(self.pages, ("gpu_slot", "gen"))  # one read of the two columns
        slots: list[int] = now["gpu_slot"]
        gens: list[int] = now["gen"]
        rows = zip(self.pages, slots, gens, strict=True)
        self.own: list[tuple[int, int, int]] = [row for row in rows if row[0] not in pinned]  # unpinned pages
        self.slots: tuple[int, ...] = tuple(slots)
        self.runtime = manager.kernel_lease([runtime_lease], device) if runtime_lease is not None else None
        self.block_table = torch.tensor([slots or [-1]], dtype=torch.int32, device=device)
        self.lease_generations = torch.tensor([gens or [0]], dtype=torch.int32, device=device)
        self.seq_lens = torch.tensor([manager.frontier(seq_id)], dtype=torch.int32, device=device)
        self.passed: int | None = None  # the manager's version when the own pages last checked out

    def check_live(self) -> None:
        """Raise (the runtime's lease errors, or StaleLeaseError for an own page) unless every page
        is still what the lease recorded.  The own pages are read again only when the manager's
        ``version`` moved since they last checked out (until then their values and slots are those)."""
        if self.runtime is not None:
            self.runtime.check_live()
        if not self.own:
            return
        version = self.manager.version()  # (taken before the reads: a change during them moves it on)
        if version == self.passed:
            return
        own = [pid for pid, _, _ in self.own]
        now = self.manager.page_values(own, ("tier", "gpu_slot", "gen"))
        held = set(self.manager.sequence_pages(self.seq_id))
        for (pid, slot, gen), tier, at, g in zip(self.own, now["tier"], now["gpu_slot"], now["gen"], strict=True):
            if tier != "gpu" or at != slot or g != gen or pid not in held:
                raise StaleLeaseError(
                    f"sequence {self.seq_id!r}: own page {pid} moved (tier {tier}, slot {at}, "
                    f"gen {g}; leased slot {slot}, gen {gen})")
        self.passed = version


class FixedLease(KernelLease):
    """A lease that trusts a fixed block table (the unsafe mode: nothing is re-validated)."""

    def __init__(self, slots: Sequence[int], generations: Sequence[int], length: int,
                 device: torch.device) -> None:
        self.slots = tuple(slots)
        self.block_table = torch.tensor([list(slots) or [-1]], dtype=torch.int32, device=device)
        self.lease_generations = torch.tensor([list(generations) or [0]], dtype=torch.int32, device=device)
        self.seq_lens = torch.tensor([length], dtype=torch.int32, device=device)

    def check_live(self) -> None:
        """Always live."""
