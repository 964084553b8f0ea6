"""Writer kernels (store, compress, page copy) against their references, and an end-to-end pass:
tokens stored chunk by chunk, pages compressed as they complete, every layer kind read back and
compared with the dense model math."""

from __future__ import annotations

import pytest
import torch

from morphcache.kernels import (
    compress,
    compressed_read,
    gather_pages,
    indexer_topk,
    reference_compress,
    reference_compressed_read,
    reference_gather_pages,
    reference_indexer_topk,
    reference_scatter_pages,
    reference_sparse_read,
    reference_store,
    reference_window_read,
    scatter_pages,
    sparse_read,
    store,
    window_read,
)


@pytest.mark.parametrize(
    "P,C,Hkv,D,N", [(6, 4, 2, 16, 7), (5, 5, 3, 12, 13), (3, 16, 1, 16, 1), (9, 3, 2, 8, 27)]
)
def test_store_matches_reference(P: int, C: int, Hkv: int, D: int, N: int) -> None:  # noqa: N803
    gen = torch.Generator(torch.get_default_device()).manual_seed(P * C + N)
    raw_k, raw_v = torch.randn(P, C, Hkv, D, generator=gen), torch.randn(P, C, Hkv, D, generator=gen)
    k, v = torch.randn(N, Hkv, D, generator=gen), torch.randn(N, Hkv, D, generator=gen)
    slots = torch.randperm(P * C, generator=gen)[:N]
    slots[::3] = -1  # padding tokens are skipped
    got_k, got_v = raw_k.clone(), raw_v.clone()
    store(k, v, slots, got_k, got_v)
    reference_store(k, v, slots, raw_k, raw_v)
    assert torch.equal(got_k, raw_k) and torch.equal(got_v, raw_v)


def test_store_with_no_tokens_is_a_no_op() -> None:
    raw_k, raw_v = torch.randn(2, 4, 1, 16), torch.randn(2, 4, 1, 16)
    before = raw_k.clone()
    store(torch.zeros(0, 1, 16), torch.zeros(0, 1, 16), torch.zeros(0, dtype=torch.int64), raw_k, raw_v)
    assert torch.equal(raw_k, before)


@pytest.mark.parametrize("P,C,Hkv,D", [(6, 4, 2, 16), (5, 5, 3, 12), (4, 16, 1, 16), (7, 3, 4, 8)])
@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64])
def test_compress_matches_reference(P: int, C: int, Hkv: int, D: int, ids_dtype: torch.dtype) -> None:  # noqa: N803
    gen = torch.Generator(torch.get_default_device()).manual_seed(P + C + D)
    raw_k, raw_v = torch.randn(P, C, Hkv, D, generator=gen) * 3, torch.randn(P, C, Hkv, D, generator=gen)
    bias = torch.randn(C, Hkv, D, generator=gen)
    page_ids = torch.randperm(P, generator=gen)[: P - 1].to(ids_dtype)
    got = [torch.zeros(P, Hkv, D), torch.zeros(P, Hkv, D), torch.zeros(P, D)]
    want = [t.clone() for t in got]
    compress(page_ids, raw_k, raw_v, bias, *got)
    reference_compress(page_ids, raw_k, raw_v, bias, *want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    untouched = list(set(range(P)) - set(page_ids.tolist()))
    assert got[0][untouched].abs().sum() == 0  # pages not listed are not written


@pytest.mark.parametrize("shape", [(7, 4, 2, 16), (7, 2, 16), (7, 16), (9, 5, 3, 12)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16])
def test_page_copy_round_trip_matches_reference(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    gen = torch.Generator(torch.get_default_device()).manual_seed(len(shape))
    pool = (torch.randn(*shape, generator=gen) * 100).to(dtype)
    ids = torch.tensor([6, 0, 3, 5], dtype=torch.int32)
    staging = gather_pages(pool, ids, alignment=8)
    assert torch.equal(staging, reference_gather_pages(pool, ids))
    out = torch.empty_like(staging)
    assert gather_pages(pool, ids, out, alignment=8) is out and torch.equal(out, staging)
    target, want = torch.zeros_like(pool), torch.zeros_like(pool)
    scatter_pages(staging, target, ids, alignment=8)
    reference_scatter_pages(staging, want, ids)
    assert torch.equal(target, want)


def test_page_copy_large_page_spans_several_programs() -> None:
    pool = torch.randn(4, 3, 700)  # 2100 values per page: more than one copy tile
    ids = torch.tensor([3, 1], dtype=torch.int64)
    staging = gather_pages(pool, ids)
    assert torch.equal(staging, pool[[3, 1]])
    pool2 = torch.zeros_like(pool)
    scatter_pages(staging, pool2, ids)
    assert torch.equal(pool2[[3, 1]], staging)


def test_end_to_end_store_compress_read(make_world, lease_cls) -> None:
    """Stream two sequences in (prefill chunk, then token by token), compressing pages as they fill."""
    c, hkv, hq, d, window, top = 4, 2, 4, 16, 6, 2
    world = make_world([14, 9], C=c, Hkv=hkv, D=d, seed=7)
    raw_k, raw_v = torch.randn_like(world.raw_k), torch.randn_like(world.raw_v)  # garbage everywhere
    comp_k, comp_v = torch.randn_like(world.comp_k), torch.randn_like(world.comp_v)
    idx_k = torch.randn_like(world.idx_k)
    written = [0, 0]
    chunks = [(0, 7), (1, 5), (0, 1), (1, 1), (0, 6), (1, 3)]
    for seq, n_new in chunks:
        lo, hi = written[seq], written[seq] + n_new
        pos = torch.arange(lo, hi)
        slots = world.block_table[seq, pos // c].long() * c + pos % c
        store(world.dense_k[seq][lo:hi], world.dense_v[seq][lo:hi], slots, raw_k, raw_v)
        full = [world.page(seq, b) for b in range(lo // c, hi // c)]
        if full:
            ids = torch.tensor(full, dtype=torch.int32)
            compress(ids, raw_k, raw_v, world.pool_bias, comp_k, comp_v, idx_k)
        written[seq] = hi
    assert written == world.seq_lens
    for s, t in enumerate(world.seq_lens):
        for b in range(t // c):
            torch.testing.assert_close(comp_k[world.page(s, b)], world.comp_k[world.page(s, b)])
    q, q_seq, q_pos = world.prefill_queries(hq, stride=2)
    lease = world.lease()
    args = (world.block_table,)
    want_pools = (world.comp_k, world.comp_v, world.raw_k, world.raw_v)
    sel = indexer_topk(q, q_seq, q_pos, lease, idx_k, world.gen_table, top, page_size=c)
    assert torch.equal(sel, reference_indexer_topk(q, q_seq, q_pos, *args, world.idx_k, top, c))
    torch.testing.assert_close(
        compressed_read(q, q_seq, q_pos, lease, comp_k, comp_v, raw_k, raw_v, world.gen_table),
        reference_compressed_read(q, q_seq, q_pos, *args, *want_pools),
    )
    torch.testing.assert_close(
        sparse_read(q, q_seq, q_pos, lease, sel, comp_k, comp_v, raw_k, raw_v, world.gen_table),
        reference_sparse_read(q, q_seq, q_pos, *args, sel, *want_pools),
    )
    torch.testing.assert_close(
        window_read(q, q_seq, q_pos, lease, raw_k, raw_v, world.gen_table, window),
        reference_window_read(q, q_seq, q_pos, *args, world.raw_k, world.raw_v, window),
    )
    assert lease.live_checks == 4
