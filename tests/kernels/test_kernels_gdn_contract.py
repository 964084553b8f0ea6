"""Launcher contracts of the gated-delta-rule kernels: every tensor argument mutated in the five
generic ways (dtype, rank, strides, alignment, device), then the checks specific to them; each
violation raises its own KernelContractError subclass, names the argument, and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from test_kernels_contract import MUTATIONS

from morphcache.kernels import (
    DuplicateIndexError,
    IndexRangeError,
    KernelContractError,
    LeaseRequiredError,
    ParameterError,
    ShapeError,
    gdn_decode,
    gdn_prefill,
    gdn_restore,
)

Args = dict[str, Any]
H, K, V = 2, 4, 8


def _i32(values: list[Any]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


@pytest.fixture
def args(lease_cls) -> Args:
    gen = torch.Generator(torch.get_default_device()).manual_seed(0)
    t, n = 7, 2
    table = _i32([[4, -1, 5], [-1, 6, -1]])
    return {
        "lease_cls": lease_cls,
        "q": torch.randn(t, H, K, generator=gen),
        "k": torch.randn(t, H, K, generator=gen),
        "v": torch.randn(t, H, V, generator=gen),
        "g": -torch.rand(t, H, generator=gen),
        "beta": torch.rand(t, H, generator=gen),
        "cu_seqlens": _i32([0, 3, 7]),
        "start_pos": _i32([2, 0]),
        "state_slot": _i32([0, 1]),
        "reset": _i32([0, 1]),
        "states": torch.randn(8, H, K, V, generator=gen),
        "checkpoint_slots": _i32([[-1, 2], [-1, 3]]),
        "dq": torch.randn(n, H, K, generator=gen),
        "dk": torch.randn(n, H, K, generator=gen),
        "dv": torch.randn(n, H, V, generator=gen),
        "dg": -torch.rand(n, H, generator=gen),
        "dbeta": torch.rand(n, H, generator=gen),
        "save_slot": _i32([-1, 7]),
        "rows": _i32([0, 1]),
        "blocks": _i32([2, 1]),
        "dst": _i32([0, 1]),
        "lease.block_table": table,
        "lease.lease_generations": torch.zeros(2, 3, dtype=torch.int32),
        "lease.seq_lens": _i32([12, 9]),
        "gen_table": torch.zeros(8, dtype=torch.int32),
    }


def _lease(a: Args) -> Any:
    return a.get("lease", a["lease_cls"](a["lease.block_table"], a["lease.lease_generations"], a["lease.seq_lens"]))


CALLS: dict[str, tuple[Callable[[Args], Any], tuple[str, ...]]] = {
    "gdn_prefill": (
        lambda a: gdn_prefill(
            a["q"], a["k"], a["v"], a["g"], a["beta"], a["cu_seqlens"], a["start_pos"], a["state_slot"], a["reset"],
            a["states"], page_size=a.get("page_size", 4), checkpoint_slots=a["checkpoint_slots"],
        ),
        ("q", "k", "v", "g", "beta", "cu_seqlens", "start_pos", "state_slot", "reset", "states", "checkpoint_slots"),
    ),
    "gdn_decode": (
        lambda a: gdn_decode(
            a["dq"], a["dk"], a["dv"], a["dg"], a["dbeta"], a["state_slot"], a["states"], save_slot=a["save_slot"]
        ),
        ("dq", "dk", "dv", "dg", "dbeta", "state_slot", "states", "save_slot"),
    ),
    "gdn_restore": (
        lambda a: gdn_restore(
            a["rows"], a["blocks"], a["dst"], _lease(a), a["states"], a["gen_table"], page_size=a.get("page_size", 4)
        ),
        ("rows", "blocks", "dst", "lease.block_table", "lease.lease_generations", "lease.seq_lens", "states",
         "gen_table"),
    ),
}
INDEX_ARGS = {"cu_seqlens", "start_pos", "state_slot", "reset", "checkpoint_slots", "save_slot", "rows", "blocks",
              "dst", "gen_table", "lease.block_table", "lease.lease_generations", "lease.seq_lens"}
SHOWN_AS = {"dq": "q", "dk": "k", "dv": "v", "dg": "g", "dbeta": "beta", "dst": "state_slot"}  # launcher arg names
GENERIC = [
    (op, arg, kind)
    for op, (_, names) in CALLS.items()
    for arg in names
    for kind in MUTATIONS
    if not (arg in INDEX_ARGS and kind == "alignment")
]


@pytest.mark.parametrize("op", list(CALLS))
def test_valid_arguments_pass(args: Args, op: str) -> None:
    CALLS[op][0](args)


@pytest.mark.parametrize("op,arg,kind", GENERIC, ids=[f"{o}-{a}-{k}" for o, a, k in GENERIC])
def test_each_tensor_violation_is_named(args: Args, op: str, arg: str, kind: str) -> None:
    mutate, error, phrase = MUTATIONS[kind]
    args[arg] = mutate(args[arg])
    before = args["states"].clone() if args["states"].device.type != "meta" else None
    with pytest.raises(error, match=phrase) as err:
        CALLS[op][0](args)
    assert f"{op}: {SHOWN_AS.get(arg, arg)}" in str(err.value)
    if before is not None:
        assert torch.equal(args["states"], before)


SPECIFIC: list[tuple[str, str, Callable[[Args], None], type[KernelContractError], str]] = [
    ("gdn_prefill", "page size 0", lambda a: a.update(page_size=0), ParameterError, "page_size"),
    ("gdn_prefill", "cu_seqlens length", lambda a: a.update(cu_seqlens=_i32([0, 7])), ShapeError, "cu_seqlens"),
    ("gdn_prefill", "cu_seqlens end", lambda a: a.update(cu_seqlens=_i32([0, 3, 6])), IndexRangeError, "end at T=7"),
    ("gdn_prefill", "cu_seqlens order", lambda a: a.update(cu_seqlens=_i32([0, 8, 7])), IndexRangeError,
     "cu_seqlens\\[2\\]"),
    ("gdn_prefill", "negative start", lambda a: a.update(start_pos=_i32([-1, 0])), IndexRangeError, "start_pos"),
    ("gdn_prefill", "reset not a flag", lambda a: a.update(reset=_i32([2, 0])), IndexRangeError, "reset"),
    ("gdn_prefill", "slot out of range", lambda a: a.update(state_slot=_i32([0, 8])), IndexRangeError, "state_slot"),
    ("gdn_prefill", "slot twice", lambda a: a.update(state_slot=_i32([1, 1])), DuplicateIndexError, "state_slot"),
    ("gdn_prefill", "table too narrow", lambda a: a.update(page_size=2, checkpoint_slots=_i32([[-1], [-1]])),
     IndexRangeError, "columns"),
    ("gdn_prefill", "checkpoint is a working slot", lambda a: a.update(checkpoint_slots=_i32([[-1, 1], [-1, 3]])),
     DuplicateIndexError, "checkpoint_slots and state_slot"),
    ("gdn_prefill", "checkpoint slot out of range", lambda a: a.update(checkpoint_slots=_i32([[-2, 2], [-1, 3]])),
     IndexRangeError, "checkpoint_slots"),
    ("gdn_decode", "save into a working slot", lambda a: a.update(save_slot=_i32([1, -1])), DuplicateIndexError,
     "save_slot and state_slot"),
    ("gdn_decode", "slot out of range", lambda a: a.update(state_slot=_i32([0, 9])), IndexRangeError, "state_slot"),
    ("gdn_restore", "block beyond the lease", lambda a: a.update(blocks=_i32([2, 2])), IndexRangeError,
     "inside the lease"),
    ("gdn_restore", "no checkpoint there", lambda a: a.update(blocks=_i32([1, 1])), IndexRangeError,
     "lease.block_table\\[rows, blocks\\]"),
    ("gdn_restore", "column out of range", lambda a: a.update(blocks=_i32([3, 1])), IndexRangeError, "blocks"),
    ("gdn_restore", "row out of range", lambda a: a.update(rows=_i32([0, 2])), IndexRangeError, "rows"),
    ("gdn_restore", "restore onto a checkpoint read", lambda a: a.update(dst=_i32([6, 1])), DuplicateIndexError,
     "state_slot"),
    ("gdn_restore", "not a lease", lambda a: a.update(lease=object()), LeaseRequiredError, "KernelLease"),
]


@pytest.mark.parametrize("op,name,change,error,phrase", SPECIFIC, ids=[s[1] for s in SPECIFIC])
def test_specific_violation(
    args: Args, op: str, name: str, change: Callable[[Args], None], error: type[KernelContractError], phrase: str
) -> None:
    change(args)
    before = args["states"].clone()
    with pytest.raises(error, match=phrase):
        CALLS[op][0](args)
    assert torch.equal(args["states"], before)
