"""The lease a read launcher requires.

A lease is the runtime's promise that the pages listed in its block table stay pinned (not evicted,
recompressed or moved) until it is released.  The kernels do not trust the promise blindly: every
read kernel compares each page's current generation in the device-side ``gen_table`` with the
generation the lease recorded and refuses stale pages (see ``StaleReadError``).

::

    block_table[seq]        [ 17,  4, 30,  9, -1, -1 ]   page id of block b of sequence seq
    lease_generations[seq]  [  3,  1,  7,  2,  0,  0 ]   gen_table[page] when the lease was granted
    seq_lens[seq]           13                           tokens covered (C = 4: blocks 0..3)
"""

from __future__ import annotations

import abc

import torch

from .errors import LeaseRequiredError


class KernelLease(abc.ABC):
    """A live lease over a batch of block-table rows.

    Subclasses (the runtime's leases) provide the three tensors and ``check_live``.
    """

    block_table: torch.Tensor  # int32 [B, max_pages], -1 padded
    lease_generations: torch.Tensor  # int32 [B, max_pages]
    seq_lens: torch.Tensor  # int32 [B] tokens covered by the lease

    @abc.abstractmethod
    def check_live(self) -> None:
        """Raise if the lease was released or is otherwise not live; return None if it is."""


def require_live_lease(lease: object, op: str) -> KernelLease:
    """Return ``lease`` if it is a ``KernelLease`` and ``check_live`` passes.

    Raises ``LeaseRequiredError`` for anything that is not a ``KernelLease``; whatever
    ``check_live`` raises propagates unchanged.
    """
    if not isinstance(lease, KernelLease):
        raise LeaseRequiredError(
            f"{op}: lease: expected a KernelLease instance, got {type(lease).__name__}"
        )
    lease.check_live()
    return lease
