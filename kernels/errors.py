"""Errors raised by the cache kernel launchers.

Two families:

* ``KernelContractError`` (a ``ValueError``): the launcher refused to launch because an argument
  breaks the operator interface contract (dtype, shape, layout, alignment, index range, device,
  aliasing, lease type).  Nothing was written; no kernel ran.
* ``StaleReadError`` (a ``RuntimeError``): a read kernel ran and found, on the device, that a page it
  was about to read carries a generation different from the one recorded when its lease was
  granted.  The kernel skipped those pages; the output of the flagged sequences must not be used.
"""

from __future__ import annotations

from collections.abc import Iterable


class KernelContractError(ValueError):
    """An argument of a kernel launcher breaks the kernel's interface contract."""


class DTypeError(KernelContractError):
    """A tensor has the wrong dtype."""


class ShapeError(KernelContractError):
    """A tensor has the wrong rank or size, or sizes of two arguments disagree."""


class LayoutError(KernelContractError):
    """A tensor is not laid out as the kernel addresses it (not contiguous, odd strides)."""


class AlignmentError(KernelContractError):
    """A tensor's address or page size is not a multiple of the required alignment."""


class IndexRangeError(KernelContractError):
    """An index (page id, slot, position, sequence row, block-table entry) is out of range."""


class DuplicateIndexError(KernelContractError):
    """An index that must be unique (a written slot or page, a selected page) appears twice."""


class DeviceError(KernelContractError):
    """Tensors live on different devices, or on a device the kernels cannot run on."""


class AliasingError(KernelContractError):
    """Two tensors that the kernel reads and writes independently share memory."""


class ParameterError(KernelContractError):
    """A scalar parameter (top-k, window, alignment, page size) is out of its domain."""


class LeaseRequiredError(KernelContractError, TypeError):
    """A read launcher was given something that is not a ``KernelLease``."""


class StaleReadError(RuntimeError):
    """A read kernel met pages whose generation changed after their lease was granted.

    ``sequences`` lists the block-table rows whose outputs are invalid.
    """

    def __init__(self, op: str, sequences: Iterable[int]) -> None:
        self.op = op
        self.sequences: tuple[int, ...] = tuple(sorted(int(s) for s in sequences))
        super().__init__(
            f"{op}: stale read refused for sequences {list(self.sequences)}: "
            "gen_table no longer matches the generations recorded in the lease"
        )
