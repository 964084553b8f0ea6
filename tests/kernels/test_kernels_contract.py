"""Launcher contract checks: every violation raises its own KernelContractError subclass, with a
one-line message naming the operation and the argument, before any kernel runs.

The first half mutates every tensor argument of every launcher in five generic ways (dtype, rank,
strides, address alignment, device); the second half covers the index ranges and parameters that
are specific to one operation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from morphcache.kernels import (
    AliasingError,
    AlignmentError,
    DeviceError,
    DTypeError,
    DuplicateIndexError,
    IndexRangeError,
    KernelContractError,
    LayoutError,
    ParameterError,
    ShapeError,
    compress,
    compressed_read,
    gather_pages,
    indexer_topk,
    reference_indexer_topk,
    scatter_pages,
    sparse_read,
    store,
    window_read,
)
from morphcache.kernels._contract import Contract

Args = dict[str, Any]
LEASE_PARTS = ("lease.block_table", "lease.lease_generations", "lease.seq_lens")


def _world_args(make_world, lease_cls) -> Args:
    world = make_world([9, 14], C=4, Hkv=2, D=16)
    q, q_seq, q_pos = world.prefill_queries(4, stride=4)
    lease = world.lease()
    gen = torch.Generator(torch.get_default_device()).manual_seed(5)
    n_tok = 6
    return {
        "world": world,
        "lease_cls": lease_cls,
        "q": q,
        "q_seq": q_seq,
        "q_pos": q_pos,
        "lease.block_table": lease.block_table,
        "lease.lease_generations": lease.lease_generations,
        "lease.seq_lens": lease.seq_lens,
        "raw_k": world.raw_k.clone(),
        "raw_v": world.raw_v.clone(),
        "comp_k": world.comp_k.clone(),
        "comp_v": world.comp_v.clone(),
        "idx_k": world.idx_k.clone(),
        "pool_bias": world.pool_bias,
        "gen_table": world.gen_table,
        "topk": reference_indexer_topk(q, q_seq, q_pos, world.block_table, world.idx_k, 2, 4),
        "k": torch.randn(n_tok, 2, 16, generator=gen),
        "v": torch.randn(n_tok, 2, 16, generator=gen),
        "slot_mapping": torch.tensor([3, -1, 33, 7, 11, 0], dtype=torch.int64),
        "page_ids": torch.tensor([2, 0, 5], dtype=torch.int32),
        "pool": world.comp_k.clone(),
        "staging": torch.randn(3, 2, 16, generator=gen),
        "out": torch.empty(3, 2, 16),
    }


def _lease(a: Args) -> Any:
    lease = a["lease_cls"](a["lease.block_table"], a["lease.lease_generations"], a["lease.seq_lens"])
    return a.get("lease", lease)


CALLS: dict[str, tuple[Callable[[Args], Any], tuple[str, ...]]] = {
    "store": (
        lambda a: store(a["k"], a["v"], a["slot_mapping"], a["raw_k"], a["raw_v"], **a.get("kw", {})),
        ("k", "v", "slot_mapping", "raw_k", "raw_v"),
    ),
    "compress": (
        lambda a: compress(
            a["page_ids"], a["raw_k"], a["raw_v"], a["pool_bias"], a["comp_k"], a["comp_v"], a["idx_k"],
            **a.get("kw", {}),
        ),
        ("page_ids", "raw_k", "raw_v", "pool_bias", "comp_k", "comp_v", "idx_k"),
    ),
    "indexer_topk": (
        lambda a: indexer_topk(
            a["q"], a["q_seq"], a["q_pos"], _lease(a), a["idx_k"], a["gen_table"], a.get("K", 2),
            page_size=a.get("page_size", 4), **a.get("kw", {}),
        ),
        ("q", "q_seq", "q_pos", *LEASE_PARTS, "idx_k", "gen_table"),
    ),
    "compressed_read": (
        lambda a: compressed_read(
            a["q"], a["q_seq"], a["q_pos"], _lease(a), a["comp_k"], a["comp_v"], a["raw_k"], a["raw_v"],
            a["gen_table"], **a.get("kw", {}),
        ),
        ("q", "q_seq", "q_pos", *LEASE_PARTS, "comp_k", "comp_v", "raw_k", "raw_v", "gen_table"),
    ),
    "sparse_read": (
        lambda a: sparse_read(
            a["q"], a["q_seq"], a["q_pos"], _lease(a), a["topk"], a["comp_k"], a["comp_v"], a["raw_k"],
            a["raw_v"], a["gen_table"], **a.get("kw", {}),
        ),
        ("q", "q_seq", "q_pos", *LEASE_PARTS, "topk", "comp_k", "comp_v", "raw_k", "raw_v", "gen_table"),
    ),
    "window_read": (
        lambda a: window_read(
            a["q"], a["q_seq"], a["q_pos"], _lease(a), a["raw_k"], a["raw_v"], a["gen_table"],
            a.get("W", 5), **a.get("kw", {}),
        ),
        ("q", "q_seq", "q_pos", *LEASE_PARTS, "raw_k", "raw_v", "gen_table"),
    ),
    "gather_pages": (
        lambda a: gather_pages(a["pool"], a["page_ids"], a["out"], **a.get("kw", {})),
        ("pool", "page_ids", "out"),
    ),
    "scatter_pages": (
        lambda a: scatter_pages(a["staging"], a["pool"], a["page_ids"], **a.get("kw", {})),
        ("staging", "pool", "page_ids"),
    ),
}


def _other_dtype(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.float32:
        return t.double()
    if t.dtype == torch.int64:
        return t.int()
    return t.to(torch.int16) if t.dtype == torch.int32 else t.float()


def _strided(t: torch.Tensor) -> torch.Tensor:
    """Same values and shape, every stride doubled (not contiguous)."""
    buf = torch.zeros(t.numel() * 2, dtype=t.dtype)
    strides = [2 * s for s in t.contiguous().stride()]
    view = buf.as_strided(t.shape, strides)
    view.copy_(t)
    return view


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """Same values, shape and contiguity, address one element past an aligned allocation."""
    buf = torch.zeros(t.numel() + 1, dtype=t.dtype)
    view = buf[1:].view(t.shape)
    view.copy_(t)
    return view


MUTATIONS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], type[KernelContractError], str]] = {
    "dtype": (_other_dtype, DTypeError, "expected dtype"),
    "rank": (lambda t: t.unsqueeze(0), ShapeError, "expected shape"),
    "strides": (_strided, LayoutError, "expected contiguous strides"),
    "alignment": (_misaligned, AlignmentError, "data_ptr % 16"),
    "device": (lambda t: t.to("meta"), DeviceError, "device"),
}
INDEX_ARGS = {"slot_mapping", "page_ids", "q_seq", "q_pos", "topk", "gen_table", *LEASE_PARTS}
GENERIC = [
    (op, arg, kind)
    for op, (_, names) in CALLS.items()
    for arg in names
    for kind in MUTATIONS
    if not (arg == "pool" and kind == "rank")  # page copy takes pools of any rank
    if not (arg in INDEX_ARGS and kind == "alignment")  # index tensors: natural alignment only
]


@pytest.fixture
def args(make_world, lease_cls) -> Args:
    return _world_args(make_world, lease_cls)


@pytest.mark.parametrize("op", list(CALLS))
def test_valid_arguments_pass(args: Args, op: str) -> None:
    CALLS[op][0](args)


@pytest.mark.parametrize("op,arg,kind", GENERIC, ids=[f"{o}-{a}-{k}" for o, a, k in GENERIC])
def test_each_tensor_violation_is_named(args: Args, op: str, arg: str, kind: str) -> None:
    mutate, error, phrase = MUTATIONS[kind]
    if kind == "dtype" and arg == "pool":  # any pool dtype works; staging must follow it
        arg_blamed = "out" if op == "gather_pages" else "staging"
    else:
        arg_blamed = arg
    args[arg] = mutate(args[arg])
    with pytest.raises(error) as info:
        CALLS[op][0](args)
    msg = str(info.value)
    assert msg.startswith(f"{op}: "), msg
    assert f"{arg_blamed}:" in msg or f"{arg_blamed}[" in msg, msg
    assert phrase in msg, msg
    assert "\n" not in msg
    assert isinstance(info.value, KernelContractError) and isinstance(info.value, ValueError)


# -- index ranges and parameters -------------------------------------------------------------------
def _set(a: Args, name: str, fn: Callable[[torch.Tensor], None]) -> None:
    t = a[name].clone()
    fn(t)
    a[name] = t


SPECIFIC: list[tuple[str, str, Callable[[Args], None], type[KernelContractError], str]] = [
    # store
    ("store", "slot past the pool", lambda a: _set(a, "slot_mapping", lambda t: t.__setitem__(2, 9 * 4 * 9)),
     IndexRangeError, r"slot_mapping\[2\]: expected slot \(negative = skip\) < \d+"),
    ("store", "slot written twice", lambda a: _set(a, "slot_mapping", lambda t: t.__setitem__(3, 33)),
     DuplicateIndexError, "slot_mapping: expected unique entries, got 33"),
    ("store", "k and v alias", lambda a: a.update(v=a["k"]), AliasingError, "expected memory disjoint"),
    ("store", "raw_v aliases raw_k", lambda a: a.update(raw_v=a["raw_k"]), AliasingError, "raw_"),
    ("store", "odd alignment", lambda a: a.update(kw={"alignment": 12}), ParameterError,
     "alignment: expected a power of two"),
    ("store", "head count mismatch", lambda a: a.update(k=torch.zeros(6, 3, 16)), ShapeError,
     r"k: expected shape \[N=6, Hkv=2, D=16\], got \[6, 3, 16\]"),
    # compress
    ("compress", "page id past the pool", lambda a: _set(a, "page_ids", lambda t: t.__setitem__(1, 99)),
     IndexRangeError, r"page_ids\[1\]: expected page id in \[0, \d+\), got 99"),
    ("compress", "negative page id", lambda a: _set(a, "page_ids", lambda t: t.__setitem__(0, -1)),
     IndexRangeError, "page_ids"),
    ("compress", "bias of another page size", lambda a: a.update(pool_bias=torch.zeros(5, 2, 16)), ShapeError,
     r"pool_bias: expected shape \[C=4, Hkv=2, D=16\]"),
    ("compress", "output aliases input", lambda a: a.update(comp_v=a["comp_k"]), AliasingError, "comp_"),
    ("compress", "indexer keys of another head dim",
     lambda a: a.update(idx_k=torch.zeros(a["idx_k"].shape[0], 8)),
     ShapeError, r"idx_k: expected shape \[P=\d+, D=16\], got \[\d+, 8\]"),
    # reads: lease and queries
    ("compressed_read", "query row out of range", lambda a: _set(a, "q_seq", lambda t: t.__setitem__(0, 2)),
     IndexRangeError, r"q_seq\[0\]: expected block-table row in \[0, 2\), got 2"),
    ("compressed_read", "position past the lease",
     lambda a: _set(a, "q_pos", lambda t: t.__setitem__(-1, 14)),
     IndexRangeError, r"q_pos\[\d+\]: expected position < lease.seq_lens\[1\]=14, got 14"),
    ("compressed_read", "negative position", lambda a: _set(a, "q_pos", lambda t: t.__setitem__(0, -1)),
     IndexRangeError, r"q_pos\[0\]"),
    ("compressed_read", "lease longer than its table",
     lambda a: _set(a, "lease.seq_lens", lambda t: t.__setitem__(0, 4 * 5 + 1)),
     IndexRangeError, r"lease.seq_lens\[0\]: expected token count in \[0, 21\), got 21"),
    ("compressed_read", "hole in the read pages",
     lambda a: _set(a, "lease.block_table", lambda t: t.__setitem__((1, 1), -1)),
     IndexRangeError, r"lease.block_table\[1, 1\]: expected page id in \[0, \d+\) for block read by query"),
    ("compressed_read", "page id past the pool",
     lambda a: _set(a, "lease.block_table", lambda t: t.__setitem__((0, 0), 1000)),
     IndexRangeError, r"lease.block_table\[0, 0\]"),
    ("compressed_read", "generations of another table",
     lambda a: a.update({"lease.lease_generations": a["lease.lease_generations"][:, :-1].contiguous()}),
     ShapeError, r"lease.lease_generations: expected shape \[B=2, max_pages=5\]"),
    ("compressed_read", "Hq not a multiple of Hkv", lambda a: a.update(q=torch.zeros(a["q"].shape[0], 3, 16)),
     ShapeError, "q: expected Hq a multiple of Hkv=2, got Hq=3"),
    ("compressed_read", "gen_table of another pool",
     lambda a: a.update(gen_table=a["gen_table"][:-1].clone()),
     ShapeError, "gen_table: expected shape"),
    # indexer_topk
    ("indexer_topk", "k = 0", lambda a: a.update(K=0), ParameterError, "k: expected an int >= 1, got 0"),
    ("indexer_topk", "k not an int", lambda a: a.update(K=2.0), ParameterError, "k: expected an int"),
    ("indexer_topk", "page size 0", lambda a: a.update(page_size=0), ParameterError, "page_size"),
    ("indexer_topk", "hole in the scored pages",
     lambda a: _set(a, "lease.block_table", lambda t: t.__setitem__((1, 0), -1)),
     IndexRangeError, r"lease.block_table\[1, 0\]"),
    # sparse_read
    ("sparse_read", "selection of the tail block",
     lambda a: _set(a, "topk", lambda t: t.__setitem__((-1, 0), 3)),
     IndexRangeError, r"topk\[\d+, 0\]: expected -1 or a complete block < q_pos // C = 3, got 3"),
    ("sparse_read", "selection below -1", lambda a: _set(a, "topk", lambda t: t.__setitem__((0, 0), -2)),
     IndexRangeError, r"topk\[0, 0\]"),
    ("sparse_read", "block selected twice",
     lambda a: _set(a, "topk", lambda t: t[-1].copy_(torch.tensor([1, 1], dtype=torch.int32))),
     DuplicateIndexError, "topk"),
    ("sparse_read", "empty selection width",
     lambda a: a.update(topk=torch.zeros(a["q"].shape[0], 0, dtype=torch.int32)),
     ParameterError, r"topk.shape\[1\]: expected an int >= 1, got 0"),
    ("sparse_read", "selection of other queries", lambda a: a.update(topk=a["topk"][:-1].contiguous()),
     ShapeError, r"topk: expected shape \[N=\d+, K\]"),
    # window_read
    ("window_read", "window 0", lambda a: a.update(W=0), ParameterError,
     "window: expected an int >= 1, got 0"),
    ("window_read", "hole inside the window",
     lambda a: _set(a, "lease.block_table", lambda t: t.__setitem__((1, 2), -1)),
     IndexRangeError, r"lease.block_table\[1, 2\]"),
    # page copy
    ("gather_pages", "page id past the pool", lambda a: _set(a, "page_ids", lambda t: t.__setitem__(2, 12)),
     IndexRangeError, r"page_ids\[2\]: expected page id in \[0, 10\), got 12"),
    ("gather_pages", "staging of another page shape", lambda a: a.update(out=torch.empty(3, 2, 15)),
     ShapeError, r"out: expected shape \[M=3, 2, 16\], got \[3, 2, 15\]"),
    ("gather_pages", "staging inside the pool", lambda a: a.update(out=a["pool"][:3]), AliasingError,
     "out: expected memory disjoint from pool"),
    ("gather_pages", "0-d pool", lambda a: a.update(pool=torch.tensor(1.0)), ShapeError, "pool"),
    ("gather_pages", "page ids of another dtype", lambda a: a.update(page_ids=a["page_ids"].to(torch.int16)),
     DTypeError, "page_ids: expected dtype int32 or int64, got int16"),
    ("scatter_pages", "page written twice", lambda a: _set(a, "page_ids", lambda t: t.__setitem__(1, 2)),
     DuplicateIndexError, "page_ids: expected unique entries, got 2"),
    ("scatter_pages", "staging dtype differs", lambda a: a.update(staging=a["staging"].double()),
     DTypeError, "staging: expected dtype float32, got float64"),
]


SPECIFIC_IDS = [f"{op}-{what.replace(' ', '_')}" for op, what, *_ in SPECIFIC]


@pytest.mark.parametrize("op,what,mutate,error,pattern", SPECIFIC, ids=SPECIFIC_IDS)
def test_specific_violation(
    args: Args, op: str, what: str, mutate: Callable[[Args], None], error: type[Exception], pattern: str
) -> None:
    mutate(args)
    with pytest.raises(error, match=f"^{re.escape(op)}: .*{pattern}") as info:
        CALLS[op][0](args)
    assert "\n" not in str(info.value)


def test_nothing_is_written_when_a_check_fails(args: Args) -> None:
    before = args["raw_k"].clone()
    _set(args, "slot_mapping", lambda t: t.__setitem__(5, 10**6))
    with pytest.raises(IndexRangeError):
        CALLS["store"][0](args)
    assert torch.equal(args["raw_k"], before)


def test_page_size_alignment_uses_the_declared_alignment() -> None:
    """A pool whose page is 20 bytes passes with alignment 4 and fails with the default 16."""
    pool = torch.randn(4, 5)
    ids = torch.tensor([1, 3], dtype=torch.int32)
    assert torch.equal(gather_pages(pool, ids, alignment=4), pool[[1, 3]])
    msg = r"gather_pages: pool: expected page size in bytes % 16 == 0, got 20"
    with pytest.raises(AlignmentError, match=msg):
        gather_pages(pool, ids)


def test_larger_declared_alignment_is_enforced() -> None:
    pool = torch.zeros(64 + 4)[4:].view(4, 16)  # 16-byte aligned, not 64-byte aligned
    if pool.data_ptr() % 64 == 0:  # pragma: no cover - allocator placed it on a 64-byte boundary
        pool = torch.zeros(64 + 8)[8:].view(4, 16)
    ids = torch.tensor([0], dtype=torch.int32)
    gather_pages(pool, ids, alignment=16)
    with pytest.raises(AlignmentError, match="pool: expected data_ptr % 64 == 0"):
        gather_pages(pool, ids, alignment=64)


@pytest.mark.parametrize("op", ["gather_pages", "scatter_pages", "compress"])
def test_index_tensors_need_only_natural_alignment(args: Args, op: str) -> None:
    """A row of a block table (4-byte aligned) is a valid page-id list."""
    table = torch.tensor([[9, 1, 4], [2, 0, 5]], dtype=torch.int32)
    args["page_ids"] = table[1, :]
    assert args["page_ids"].data_ptr() % 16 == 12
    CALLS[op][0](args)


def test_cpu_tensors_need_the_interpreter() -> None:
    """A compiled (not interpreted) kernel only accepts cuda tensors."""
    ct = Contract("window_read", 16, kernel=object())
    msg = "window_read: q: expected a cuda tensor .*TRITON_INTERPRET=1.*got device cpu"
    with pytest.raises(DeviceError, match=msg):
        ct.tensor("q", torch.zeros(2, 2, 16, device="cpu"), torch.float32, ("N", "Hq", "D"))


def test_non_tensor_argument_is_a_dtype_error(args: Args) -> None:
    args["q"] = [[0.0] * 16]
    with pytest.raises(DTypeError, match="compressed_read: q: expected a torch.Tensor, got list"):
        CALLS["compressed_read"][0](args)
