"""Read kernels (indexer top-k, compressed, sparse, window) against their references.

Awkward shapes on purpose: partial last pages, one-token sequences, page sizes that are not powers
of two, GQA groups of 3, head dim 12, k above the number of complete pages, windows shorter than a
page and longer than the sequence; decode (one query per sequence) and prefill (many).
"""

from __future__ import annotations

import pytest
import torch

from morphcache.kernels import (
    compressed_read,
    indexer_topk,
    reference_compressed_read,
    reference_indexer_topk,
    reference_sparse_read,
    reference_window_read,
    sparse_read,
    window_read,
)

ATOL = 2e-5

CASES = {  # seq_lens, C, Hkv, Hq, D
    "one-seq": ([13], 4, 2, 4, 16),
    "many-partial": ([1, 8, 19, 33], 4, 2, 4, 16),
    "C5-gqa3-D12": ([11, 27], 5, 2, 6, 12),
    "C16-mqa": ([40, 17], 16, 1, 4, 16),
    "C3-mha": ([10, 2], 3, 2, 2, 8),
}
MODES = ["decode", "prefill"]


def _setup(make_world, case: str, mode: str):
    seq_lens, c, hkv, hq, d = CASES[case]
    world = make_world(seq_lens, C=c, Hkv=hkv, D=d, seed=len(case))
    if mode == "decode":
        q, q_seq, q_pos = world.decode_queries(hq)
    else:
        q, q_seq, q_pos = world.prefill_queries(hq, stride=3)
    return world, q, q_seq, q_pos


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_compressed_read_matches_reference(make_world, case: str, mode: str) -> None:
    world, q, q_seq, q_pos = _setup(make_world, case, mode)
    got = compressed_read(
        q, q_seq, q_pos, world.lease(), world.comp_k, world.comp_v, world.raw_k, world.raw_v, world.gen_table
    )
    want = reference_compressed_read(
        q, q_seq, q_pos, world.block_table, world.comp_k, world.comp_v, world.raw_k, world.raw_v
    )
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("k", [1, 3, 64])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_indexer_topk_matches_reference(make_world, case: str, mode: str, k: int) -> None:
    world, q, q_seq, q_pos = _setup(make_world, case, mode)
    got = indexer_topk(q, q_seq, q_pos, world.lease(), world.idx_k, world.gen_table, k, page_size=world.C)
    want = reference_indexer_topk(q, q_seq, q_pos, world.block_table, world.idx_k, k, world.C)
    assert got.dtype == torch.int32 and got.shape == (q.shape[0], k)
    assert torch.equal(got, want)


@pytest.mark.parametrize("k", [1, 3, 64])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_sparse_read_matches_reference(make_world, case: str, mode: str, k: int) -> None:
    world, q, q_seq, q_pos = _setup(make_world, case, mode)
    sel = reference_indexer_topk(q, q_seq, q_pos, world.block_table, world.idx_k, k, world.C)
    got = sparse_read(
        q, q_seq, q_pos, world.lease(), sel, world.comp_k, world.comp_v, world.raw_k, world.raw_v,
        world.gen_table,
    )
    want = reference_sparse_read(
        q, q_seq, q_pos, world.block_table, sel, world.comp_k, world.comp_v, world.raw_k, world.raw_v
    )
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("window", [1, 5, 16, 1000])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_window_read_matches_reference(make_world, case: str, mode: str, window: int) -> None:
    world, q, q_seq, q_pos = _setup(make_world, case, mode)
    got = window_read(q, q_seq, q_pos, world.lease(), world.raw_k, world.raw_v, world.gen_table, window)
    want = reference_window_read(q, q_seq, q_pos, world.block_table, world.raw_k, world.raw_v, window)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)


def test_indexer_topk_ties_go_to_the_lower_block(make_world) -> None:
    world = make_world([29, 21], C=4, Hkv=2, D=16)
    # give blocks 1, 3 and 5 of sequence 0 the same indexer key (pages differ, keys identical)
    key = world.idx_k[world.page(0, 1)].clone() * 10
    for b in (5, 3, 1):
        world.idx_k[world.page(0, b)] = key
    q, q_seq, q_pos = world.prefill_queries(4, stride=4)
    q[:] = key.abs()[None, None, :] * torch.sign(key)[None, None, :]  # q aligned with the shared key
    got = indexer_topk(q, q_seq, q_pos, world.lease(), world.idx_k, world.gen_table, 4, page_size=4)
    want = reference_indexer_topk(q, q_seq, q_pos, world.block_table, world.idx_k, 4, 4)
    assert torch.equal(got, want)
    last = int(torch.nonzero(q_seq == 0).max())
    assert got[last, :3].tolist() == [1, 3, 5]


def test_sparse_read_accepts_holes_in_the_selection(make_world) -> None:
    world = make_world([30], C=4, Hkv=2, D=16)
    q, q_seq, q_pos = world.decode_queries(4)  # t = 29, bt = 7
    sel = torch.tensor([[5, -1, 0, -1, 6]], dtype=torch.int32)
    got = sparse_read(
        q, q_seq, q_pos, world.lease(), sel, world.comp_k, world.comp_v, world.raw_k, world.raw_v,
        world.gen_table,
    )
    want = reference_sparse_read(
        q, q_seq, q_pos, world.block_table, sel, world.comp_k, world.comp_v, world.raw_k, world.raw_v
    )
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)


def test_window_read_ignores_freed_pages_behind_the_window(make_world) -> None:
    """Pages that slid out of the window may be freed (-1 in the block table) without harm."""
    world = make_world([26], C=4, Hkv=2, D=16)
    q, q_seq, q_pos = world.decode_queries(4)  # t = 25, window 6 -> positions 20..25, blocks 5, 6
    lease = world.lease()
    lease.block_table[0, :5] = -1
    got = window_read(q, q_seq, q_pos, lease, world.raw_k, world.raw_v, world.gen_table, 6)
    want = reference_window_read(q, q_seq, q_pos, world.block_table, world.raw_k, world.raw_v, 6)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)


def test_reads_with_no_queries_return_empty(make_world) -> None:
    world = make_world([9], C=4, Hkv=2, D=16)
    q = torch.zeros(0, 4, 16)
    none = torch.zeros(0, dtype=torch.int32)
    lease = world.lease()
    pools = (world.comp_k, world.comp_v, world.raw_k, world.raw_v)
    out = compressed_read(q, none, none, lease, *pools, world.gen_table)
    assert out.shape == (0, 4, 16)
    sel = indexer_topk(q, none, none, lease, world.idx_k, world.gen_table, 2, page_size=4)
    assert sel.shape == (0, 2)
    out = window_read(q, none, none, lease, world.raw_k, world.raw_v, world.gen_table, 3)
    assert out.shape == (0, 4, 16)
