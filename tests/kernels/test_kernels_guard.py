"""The generation guard inside the read kernels, and the lease requirement of the read launchers.

The guard is exercised by changing ``gen_table`` behind the lease's back (what an eviction or a
recompression of the physical page would do between lookup and read): the kernel itself must
notice, skip the page and flag the sequence.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from morphcache.kernels import (
    LeaseRequiredError,
    StaleReadError,
    compressed_read,
    indexer_topk,
    reference_compressed_read,
    reference_indexer_topk,
    sparse_read,
    window_read,
)
from morphcache.kernels.compressed_read import launch_compressed_read
from morphcache.kernels.indexer_topk import launch_indexer_topk
from morphcache.kernels.sparse_read import launch_sparse_read
from morphcache.kernels.window_read import launch_window_read

C, HKV, HQ, D, W, TOP = 4, 2, 4, 16, 6, 3


def _run(op: str, world, lease, q, q_seq, q_pos) -> torch.Tensor:
    """Call the public launcher of ``op``."""
    if op == "indexer_topk":
        return indexer_topk(q, q_seq, q_pos, lease, world.idx_k, world.gen_table, TOP, page_size=C)
    if op == "compressed_read":
        return compressed_read(
            q, q_seq, q_pos, lease, world.comp_k, world.comp_v, world.raw_k, world.raw_v, world.gen_table
        )
    if op == "sparse_read":
        sel = reference_indexer_topk(q, q_seq, q_pos, world.block_table, world.idx_k, TOP, C)
        return sparse_read(
            q, q_seq, q_pos, lease, sel, world.comp_k, world.comp_v, world.raw_k, world.raw_v, world.gen_table
        )
    return window_read(q, q_seq, q_pos, lease, world.raw_k, world.raw_v, world.gen_table, W)


OPS = ["indexer_topk", "compressed_read", "sparse_read", "window_read"]


def _touched_block(op: str, world, q, q_seq, q_pos, seq: int) -> int:
    """A block of ``seq`` that ``op`` reads for its decode query."""
    t = world.seq_lens[seq] - 1
    if op == "indexer_topk":
        return 0
    if op == "sparse_read":
        sel = reference_indexer_topk(q, q_seq, q_pos, world.block_table, world.idx_k, TOP, C)
        return int(sel[seq, 0])
    if op == "window_read":
        return (t - W + 1) // C
    return 1


@pytest.mark.parametrize("op", OPS)
def test_stale_page_behind_the_lease_raises(make_world, op: str) -> None:
    world = make_world([13, 22, 17], C=C, Hkv=HKV, D=D)
    q, q_seq, q_pos = world.decode_queries(HQ)
    lease = world.lease()
    _run(op, world, lease, q, q_seq, q_pos)  # fresh: fine
    page = world.page(1, _touched_block(op, world, q, q_seq, q_pos, seq=1))
    world.gen_table[page] += 1  # the page was freed and reused after the lease was granted
    with pytest.raises(StaleReadError) as info:
        _run(op, world, lease, q, q_seq, q_pos)
    assert info.value.sequences == (1,)
    assert info.value.op == op
    assert "sequences [1]" in str(info.value)


@pytest.mark.parametrize("op", OPS)
def test_generation_changes_outside_the_read_set_are_harmless(make_world, op: str) -> None:
    world = make_world([13, 22], C=C, Hkv=HKV, D=D, spare_pages=2)
    q, q_seq, q_pos = world.decode_queries(HQ)
    leased = set(world.block_table[world.block_table >= 0].tolist())
    for page in set(range(world.P)) - leased:  # pages no sequence holds
        world.gen_table[page] += 5
    lease = world.lease()
    if op == "window_read":  # block 0 of seq 1 is far behind its window (t = 21, W = 6)
        world.gen_table[world.page(1, 0)] += 1
    if op == "indexer_topk":  # the indexer scores complete blocks only, never the tail page
        world.gen_table[world.page(1, 21 // C)] += 1
    if op == "sparse_read":  # blocks the indexer did not select are not read
        sel = reference_indexer_topk(q, q_seq, q_pos, world.block_table, world.idx_k, TOP, C)
        unselected = set(range(21 // C)) - set(sel[1].tolist())
        assert unselected
        for b in unselected:
            world.gen_table[world.page(1, b)] += 1
    _run(op, world, lease, q, q_seq, q_pos)


def test_stale_tail_page_raises(make_world) -> None:
    world = make_world([13, 22], C=C, Hkv=HKV, D=D)
    q, q_seq, q_pos = world.decode_queries(HQ)
    lease = world.lease()
    world.gen_table[world.page(0, 3)] += 1  # seq 0, t = 12: tail page is block 3
    with pytest.raises(StaleReadError) as info:
        compressed_read(
            q, q_seq, q_pos, lease, world.comp_k, world.comp_v, world.raw_k, world.raw_v, world.gen_table
        )
    assert info.value.sequences == (0,)


def test_every_flagged_sequence_is_named(make_world) -> None:
    world = make_world([9, 9, 9, 9], C=C, Hkv=HKV, D=D)
    q, q_seq, q_pos = world.prefill_queries(HQ, stride=2)
    lease = world.lease()
    world.gen_table[world.page(3, 0)] -= 1
    world.gen_table[world.page(1, 2)] += 7
    with pytest.raises(StaleReadError) as info:
        window_read(q, q_seq, q_pos, lease, world.raw_k, world.raw_v, world.gen_table, 100)
    assert info.value.sequences == (1, 3)


def test_kernel_skips_the_stale_page_and_flags_its_row(make_world) -> None:
    """The device-side guard, seen without the launcher: flags per row, stale entry left out."""
    world = make_world([17, 10], C=C, Hkv=HKV, D=D)
    q, q_seq, q_pos = world.decode_queries(HQ)  # seq 0: t = 16, blocks 0..3 compressed, tail block 4
    lease = world.lease()
    stale_page = world.page(0, 2)
    world.gen_table[stale_page] += 1
    out, err = launch_compressed_read(
        q, q_seq, q_pos, lease.block_table, lease.lease_generations, world.gen_table,
        world.comp_k, world.comp_v, world.raw_k, world.raw_v,
    )
    assert err.tolist() == [1, 0]
    # row 0 attended to blocks 0, 1, 3 and the tail only
    keys = torch.cat([world.comp_k[[world.page(0, b) for b in (0, 1, 3)]], world.raw_k[world.page(0, 4), :1]])
    vals = torch.cat([world.comp_v[[world.page(0, b) for b in (0, 1, 3)]], world.raw_v[world.page(0, 4), :1]])
    group = HQ // HKV
    k, v = keys.repeat_interleave(group, dim=1), vals.repeat_interleave(group, dim=1)
    p = torch.softmax(torch.einsum("hd,jhd->hj", q[0], k) / math.sqrt(D), dim=-1)
    torch.testing.assert_close(out[0], torch.einsum("hj,jhd->hd", p, v))
    want = reference_compressed_read(
        q, q_seq, q_pos, world.block_table, world.comp_k, world.comp_v, world.raw_k, world.raw_v
    )
    torch.testing.assert_close(out[1], want[1])


def test_topk_never_selects_a_stale_page(make_world) -> None:
    world = make_world([21], C=C, Hkv=HKV, D=D)
    q, q_seq, q_pos = world.decode_queries(HQ)
    lease = world.lease()
    hot = world.page(0, 2)
    world.idx_k[hot] = q[0].mean(dim=0) * 100  # by far the best score
    world.gen_table[hot] += 1
    sel, err = launch_indexer_topk(
        q, q_seq, q_pos, lease.block_table, lease.lease_generations, world.gen_table, world.idx_k, 5, C
    )
    assert err.tolist() == [1]
    assert 2 not in sel[0].tolist()
    assert sel[0].tolist()[-1] == -1  # 5 complete blocks, one stale: four selected


@pytest.mark.parametrize("op", OPS)
def test_guard_compiled_out_reads_without_checking(make_world, op: str) -> None:
    """``guard=False`` (benchmarks only) never flags: the stale page is read as if fresh."""
    world = make_world([13, 22], C=C, Hkv=HKV, D=D)
    q, q_seq, q_pos = world.decode_queries(HQ)
    bt, lg, gt = world.block_table, world.lease_generations, world.gen_table
    gt[world.page(1, _touched_block(op, world, q, q_seq, q_pos, seq=1))] += 1
    common = (q, q_seq, q_pos, bt, lg, gt)
    for guard in (True, False):
        if op == "indexer_topk":
            _, err = launch_indexer_topk(*common, world.idx_k, TOP, C, guard=guard)
        elif op == "compressed_read":
            _, err = launch_compressed_read(
                *common, world.comp_k, world.comp_v, world.raw_k, world.raw_v, guard=guard
            )
        elif op == "sparse_read":
            sel = reference_indexer_topk(q, q_seq, q_pos, bt, world.idx_k, TOP, C)
            _, err = launch_sparse_read(
                *common, sel, world.comp_k, world.comp_v, world.raw_k, world.raw_v, guard=guard
            )
        else:
            _, err = launch_window_read(*common, world.raw_k, world.raw_v, W, guard=guard)
        assert err.tolist() == ([0, 1] if guard else [0, 0])


# -- leases ----------------------------------------------------------------------------------------
class LookAlike:
    """Has the attributes of a lease but is not a KernelLease."""

    def __init__(self, lease) -> None:
        self.block_table = lease.block_table
        self.lease_generations = lease.lease_generations
        self.seq_lens = lease.seq_lens

    def check_live(self) -> None:
        return None


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("fake", ["look-alike", "tensor", "none"])
def test_read_refuses_anything_but_a_kernel_lease(make_world, op: str, fake: str) -> None:
    world = make_world([9], C=C, Hkv=HKV, D=D)
    q, q_seq, q_pos = world.decode_queries(HQ)
    bogus: object = {"look-alike": LookAlike(world.lease()), "tensor": world.block_table, "none": None}[fake]
    with pytest.raises(LeaseRequiredError, match=f"{op}: lease: expected a KernelLease"):
        _run(op, world, bogus, q, q_seq, q_pos)


@pytest.mark.parametrize("op", OPS)
def test_read_refuses_a_released_lease(make_world, released_error: type[Exception], op: str) -> None:
    world = make_world([9], C=C, Hkv=HKV, D=D)
    q, q_seq, q_pos = world.decode_queries(HQ)
    lease = world.lease()
    _run(op, world, lease, q, q_seq, q_pos)
    lease.release()
    with pytest.raises(released_error):
        _run(op, world, lease, q, q_seq, q_pos)


def test_lease_is_abstract(lease_cls: Callable[..., object]) -> None:
    from morphcache.kernels import KernelLease

    with pytest.raises(TypeError):
        KernelLease()  # type: ignore[abstract]
    assert issubclass(lease_cls, KernelLease)
