"""Launcher-side contract checks shared by every kernel module.

A ``Contract`` is built per launch; each check either returns quietly or raises the specific
``KernelContractError`` subclass with a one-line message ``"<op>: <arg>: expected ..., got ..."``.
Symbolic sizes (``"P"``, ``"C"``, ...) are bound the first time they are seen, so later tensors
must agree with earlier ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from triton.runtime.interpreter import InterpretedFunction

from .errors import (
    AliasingError,
    AlignmentError,
    DeviceError,
    DTypeError,
    DuplicateIndexError,
    IndexRangeError,
    LayoutError,
    ParameterError,
    ShapeError,
    StaleReadError,
)
from .lease import KernelLease

Dim = int | str


def is_interpreted(kernel: object) -> bool:
    """True when ``kernel`` was built under ``TRITON_INTERPRET=1`` (runs on CPU tensors)."""
    return isinstance(kernel, InterpretedFunction)


def _fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


class Contract:
    """Checks the arguments of one launch of operation ``op``."""

    def __init__(self, op: str, alignment: int, kernel: object) -> None:
        self.op = op
        is_int = isinstance(alignment, int) and not isinstance(alignment, bool)
        if not is_int or alignment < 1 or alignment & (alignment - 1):
            raise ParameterError(f"{op}: alignment: expected a power of two >= 1, got {alignment!r}")
        self.alignment = alignment
        self.interpreted = is_interpreted(kernel)
        self.dims: dict[str, int] = {}
        self.device: torch.device | None = None
        self.device_arg = ""

    # -- scalars -------------------------------------------------------------------------------
    def param(self, name: str, value: object, *, minimum: int) -> int:
        """Check an integer parameter (top-k, window) is an int >= ``minimum``."""
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ParameterError(f"{self.op}: {name}: expected an int >= {minimum}, got {value!r}")
        return value

    def bind(self, name: str, value: int) -> None:
        """Bind a symbolic size from a scalar argument (e.g. the page size)."""
        self.dims[name] = value

    # -- tensors -------------------------------------------------------------------------------
    def tensor(
        self,
        name: str,
        t: object,
        dtype: torch.dtype | tuple[torch.dtype, ...],
        shape: Sequence[Dim] | None = None,
        *,
        pooled: bool = False,
        index: bool = False,
    ) -> torch.Tensor:
        """Check one tensor argument.

        ``shape`` entries are ints (exact), names (bound on first use) or ``"*"`` (any size).
        Payload tensors (KV, queries, staging) must start on the launch's ``alignment``; ``index``
        tensors (slots, page ids, positions, block tables, generations) are read element-wise and
        only need their natural alignment, so a row of a block table can be passed as page ids.
        ``pooled`` marks a page pool: its page stride in bytes must also meet the alignment.
        """
        if not isinstance(t, torch.Tensor):
            raise DTypeError(f"{self.op}: {name}: expected a torch.Tensor, got {type(t).__name__}")
        dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
        if t.dtype not in dtypes:
            want = " or ".join(str(d).replace("torch.", "") for d in dtypes)
            got = str(t.dtype).replace("torch.", "")
            raise DTypeError(f"{self.op}: {name}: expected dtype {want}, got {got}")
        if shape is not None:
            self._shape(name, t, shape)
        self._device(name, t)
        if not t.is_contiguous():
            raise LayoutError(
                f"{self.op}: {name}: expected contiguous strides {_fmt_shape(_contig_strides(t.shape))}, "
                f"got {_fmt_shape(t.stride())}"
            )
        align = t.element_size() if index else self.alignment
        if t.numel() > 0 and t.data_ptr() % align:
            raise AlignmentError(
                f"{self.op}: {name}: expected data_ptr % {align} == 0, "
                f"got data_ptr % {align} == {t.data_ptr() % align}"
            )
        if pooled and t.dim() >= 1:
            page_bytes = t.stride(0) * t.element_size()
            if page_bytes % self.alignment:
                raise AlignmentError(
                    f"{self.op}: {name}: expected page size in bytes % {self.alignment} == 0, "
                    f"got {page_bytes} bytes per page"
                )
        return t

    def _shape(self, name: str, t: torch.Tensor, shape: Sequence[Dim]) -> None:
        expected = []
        ok = t.dim() == len(shape)
        for i, dim in enumerate(shape):
            if dim == "*":
                expected.append("*")
                continue
            if isinstance(dim, str):
                bound = self.dims.get(dim)
                if bound is None and ok:
                    self.dims[dim] = int(t.shape[i])
                    bound = self.dims[dim]
                expected.append(f"{dim}={bound}" if bound is not None else dim)
                if bound is not None and ok and t.shape[i] != bound:
                    ok = False
            else:
                expected.append(str(dim))
                if ok and t.shape[i] != dim:
                    ok = False
        if not ok:
            raise ShapeError(
                f"{self.op}: {name}: expected shape [{', '.join(expected)}], got {_fmt_shape(t.shape)}"
            )

    def _device(self, name: str, t: torch.Tensor) -> None:
        if self.device is None:
            allowed = ("cuda", "cpu") if self.interpreted else ("cuda",)
            if t.device.type not in allowed:
                hint = "" if self.interpreted else " (or TRITON_INTERPRET=1 for cpu)"
                want = " or ".join(allowed)
                raise DeviceError(f"{self.op}: {name}: expected a {want} tensor{hint}, got device {t.device}")
            self.device = t.device
            self.device_arg = name
        elif t.device != self.device:
            raise DeviceError(
                f"{self.op}: {name}: expected device {self.device} (as {self.device_arg}), got {t.device}"
            )

    def dim(self, name: str) -> int:
        return self.dims[name]

    # -- values --------------------------------------------------------------------------------
    def in_range(self, name: str, values: torch.Tensor, lo: int | None, hi: int, what: str = "value") -> None:
        """Every element of ``values`` lies in [lo, hi) (no lower bound when ``lo`` is None)."""
        if values.numel() == 0:
            return
        bad = values >= hi
        if lo is not None:
            bad |= values < lo
        if bool(bad.any()):
            first = tuple(int(i) for i in torch.nonzero(bad)[0].tolist())
            idx = ", ".join(str(i) for i in first)
            bound = f"in [{lo}, {hi})" if lo is not None else f"< {hi}"
            got = int(values[first])
            raise IndexRangeError(f"{self.op}: {name}[{idx}]: expected {what} {bound}, got {got}")

    def unique(self, name: str, values: torch.Tensor, *, ignore_negative: bool = False) -> None:
        """No value of the 1-d ``values`` repeats (negative entries skipped if asked)."""
        v = values[values >= 0] if ignore_negative else values
        if v.numel() < 2:
            return
        s, _ = torch.sort(v.to(torch.int64))
        dup = s[1:] == s[:-1]
        if bool(dup.any()):
            val = int(s[1:][dup][0])
            raise DuplicateIndexError(f"{self.op}: {name}: expected unique entries, got {val} more than once")

    def disjoint(self, *named: tuple[str, torch.Tensor]) -> None:
        """No two of the given tensors share bytes (the later argument is blamed)."""
        spans = []
        for order, (name, t) in enumerate(named):
            if t.numel() == 0:
                continue
            start = t.data_ptr()
            spans.append((start, start + t.numel() * t.element_size(), order, name))
        spans.sort()
        for a, b in zip(spans, spans[1:], strict=False):
            if b[0] < a[1]:
                first, second = (a, b) if a[2] < b[2] else (b, a)
                raise AliasingError(
                    f"{self.op}: {second[3]}: expected memory disjoint from {first[3]}, "
                    "got overlapping storage"
                )

    # -- lease ---------------------------------------------------------------------------------
    def lease(self, lease: KernelLease) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Check the lease's tensors; binds ``B`` and ``max_pages``."""
        table = ("B", "max_pages")
        bt = self.tensor("lease.block_table", lease.block_table, torch.int32, table, index=True)
        lg = self.tensor("lease.lease_generations", lease.lease_generations, torch.int32, table, index=True)
        sl = self.tensor("lease.seq_lens", lease.seq_lens, torch.int32, ("B",), index=True)
        return bt, lg, sl

    def queries(
        self,
        q: object,
        q_seq: object,
        q_pos: object,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        page_size: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Check q [N, Hq, D], q_seq/q_pos int32 [N] against the lease (rows, positions, pages).

        Every query's row must exist, its position must be covered by the lease
        (``q_pos < seq_lens[q_seq]``), and the lease's ``seq_lens`` must fit its block table.
        """
        qt = self.tensor("q", q, torch.float32, ("N", "Hq", "D"))
        qs = self.tensor("q_seq", q_seq, torch.int32, ("N",), index=True)
        qp = self.tensor("q_pos", q_pos, torch.int32, ("N",), index=True)
        hq, hkv = self.dims["Hq"], self.dims.get("Hkv")
        if hkv is not None and (hq < hkv or hq % hkv):
            raise ShapeError(f"{self.op}: q: expected Hq a multiple of Hkv={hkv}, got Hq={hq}")
        b, max_pages = block_table.shape
        self.in_range("lease.seq_lens", seq_lens, 0, max_pages * page_size + 1, "token count")
        self.in_range("q_seq", qs, 0, b, "block-table row")
        self.in_range("q_pos", qp, 0, 2**31 - 1, "position")
        if qs.numel():
            limit = seq_lens[qs.long()]
            bad = qp >= limit
            if bool(bad.any()):
                i = int(torch.nonzero(bad)[0])
                raise IndexRangeError(
                    f"{self.op}: q_pos[{i}]: expected position < lease.seq_lens[{int(qs[i])}]="
                    f"{int(limit[i])}, got {int(qp[i])}"
                )
        return qt, qs, qp

    def touched_pages(self, block_table: torch.Tensor, q_seq: torch.Tensor, touched: torch.Tensor) -> None:
        """Block-table entries a query will read (``touched`` [N, max_pages] bool) are page ids in [0, P)."""
        if q_seq.numel() == 0:
            return
        pages = block_table[q_seq.long()]
        bad = touched & ((pages < 0) | (pages >= self.dims["P"]))
        if bool(bad.any()):
            n, blk = (int(i) for i in torch.nonzero(bad)[0].tolist())
            seq = int(q_seq[n])
            raise IndexRangeError(
                f"{self.op}: lease.block_table[{seq}, {blk}]: expected page id in [0, {self.dims['P']}) "
                f"for block read by query {n}, got {int(pages[n, blk])}"
            )


def _contig_strides(shape: Sequence[int]) -> list[int]:
    strides = []
    acc = 1
    for s in reversed(list(shape)):
        strides.append(acc)
        acc *= max(int(s), 1)
    return list(reversed(strides))


def block_span(q_pos: torch.Tensor, max_pages: int, first: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """Mask [N, max_pages]: block b is inside [first[n], last[n]] (inclusive) for query n."""
    b = torch.arange(max_pages, device=q_pos.device)[None, :]
    return (b >= first[:, None]) & (b <= last[:, None])


def next_pow2(n: int) -> int:
    """Smallest power of two >= max(n, 1)."""
    n = max(int(n), 1)
    return 1 << (n - 1).bit_length()


def raise_if_stale(op: str, error_flags: torch.Tensor) -> None:
    """Raise ``StaleReadError`` naming every row whose flag the kernel set."""
    if bool(error_flags.any()):
        rows = torch.nonzero(error_flags).flatten().tolist()
        raise StaleReadError(op, rows)
