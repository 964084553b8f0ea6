"""The plain-torch references against a direct, unpaged reading of docs/model-math.md.

The dense side below works on one sequence's contiguous K/V [T, Hkv, D] with explicit loops over
pages, heads and positions; the references work on shuffled page pools through block tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from morphcache.kernels import (
    reference_compressed_read,
    reference_gather_pages,
    reference_indexer_topk,
    reference_scatter_pages,
    reference_sparse_read,
    reference_window_read,
)

ATOL = 1e-5


# -- dense model-math ------------------------------------------------------------------------------
def dense_compress(k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """ck, cv [T // C, Hkv, D] and ik [T // C, D] of the complete pages of one sequence."""
    c = bias.shape[0]
    n_pages = k.shape[0] // c
    ck = torch.zeros(n_pages, k.shape[1], k.shape[2])
    cv = torch.zeros_like(ck)
    for b in range(n_pages):
        kb, vb = k[b * c : (b + 1) * c], v[b * c : (b + 1) * c]
        logits = kb + bias
        e = torch.exp(logits - logits.max(dim=0).values)
        w = e / e.sum(dim=0)
        ck[b] = (w * kb).sum(dim=0)
        cv[b] = (w * vb).sum(dim=0)
    return ck, cv, ck.mean(dim=1)


def dense_attend(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
    """out[h] = softmax_j(s * q[h] . keys[j, g]) @ vals[j, g] with g = h // (Hq / Hkv)."""
    hq, d = q.shape
    group = hq // keys.shape[1]
    out = torch.zeros(hq, d)
    for h in range(hq):
        g = h // group
        s = torch.stack([q[h] @ keys[j, g] for j in range(keys.shape[0])]) / math.sqrt(d)
        p = torch.softmax(s, dim=0)
        out[h] = sum(p[j] * vals[j, g] for j in range(keys.shape[0]))
    return out


def dense_compressed(
    q: torch.Tensor, t: int, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    c = bias.shape[0]
    bt = t // c
    ck, cv, _ = dense_compress(k, v, bias)
    keys = torch.cat([ck[:bt], k[bt * c : t + 1]])
    vals = torch.cat([cv[:bt], v[bt * c : t + 1]])
    return dense_attend(q, keys, vals)


def dense_selection(
    q: torch.Tensor, t: int, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, top: int
) -> list[int]:
    bt = t // bias.shape[0]
    _, _, ik = dense_compress(k, v, bias)
    qi = q.mean(dim=0)
    scored = sorted((-float(qi @ ik[b]), b) for b in range(bt))
    return [b for _, b in scored[:top]]


def dense_sparse(
    q: torch.Tensor, t: int, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, top: int
) -> torch.Tensor:
    c = bias.shape[0]
    bt = t // c
    ck, cv, _ = dense_compress(k, v, bias)
    sel = dense_selection(q, t, k, v, bias, top)
    keys = torch.cat([ck[sel], k[bt * c : t + 1]])
    vals = torch.cat([cv[sel], v[bt * c : t + 1]])
    return dense_attend(q, keys, vals)


def dense_window(q: torch.Tensor, t: int, k: torch.Tensor, v: torch.Tensor, w: int) -> torch.Tensor:
    lo = max(0, t - w + 1)
    return dense_attend(q, k[lo : t + 1], v[lo : t + 1])


SHAPES = [  # (seq_lens, C, Hkv, Hq, D)
    ([11], 4, 1, 1, 16),
    ([9, 16, 3], 4, 2, 4, 16),
    ([13, 7], 5, 2, 6, 12),
]


# -- tests -----------------------------------------------------------------------------------------
def test_contract_diagram_positions(make_world: Callable[..., object]) -> None:
    """C = 4, query at t = 10: compressed pages 0, 1; tail 8, 9, 10; window(6) = 5..10."""
    world = make_world([11], C=4, Hkv=1, D=4)
    q = torch.randn(1, 1, 4)
    k, v, bias = world.dense_k[0], world.dense_v[0], world.pool_bias
    ck, cv, _ = dense_compress(k, v, bias)
    keys = torch.cat([ck[:2], k[8:11]])
    vals = torch.cat([cv[:2], v[8:11]])
    assert torch.allclose(dense_compressed(q[0], 10, k, v, bias), dense_attend(q[0], keys, vals))
    assert torch.allclose(dense_window(q[0], 10, k, v, 6), dense_attend(q[0], k[5:11], v[5:11]))


@pytest.mark.parametrize("seq_lens,C,Hkv,Hq,D", SHAPES)
def test_compressed_pools_match_dense_compression(make_world, seq_lens, C, Hkv, Hq, D) -> None:  # noqa: N803
    world = make_world(seq_lens, C=C, Hkv=Hkv, D=D)
    for s, t in enumerate(seq_lens):
        ck, cv, ik = dense_compress(world.dense_k[s], world.dense_v[s], world.pool_bias)
        for b in range(t // C):
            page = world.page(s, b)
            assert torch.allclose(world.comp_k[page], ck[b], atol=ATOL)
            assert torch.allclose(world.comp_v[page], cv[b], atol=ATOL)
            assert torch.allclose(world.idx_k[page], ik[b], atol=ATOL)


@pytest.mark.parametrize("seq_lens,C,Hkv,Hq,D", SHAPES)
def test_reference_reads_match_dense_math(make_world, seq_lens, C, Hkv, Hq, D) -> None:  # noqa: N803
    world = make_world(seq_lens, C=C, Hkv=Hkv, D=D)
    q, q_seq, q_pos = world.prefill_queries(Hq, stride=2)
    top, window = 2, 6
    comp = reference_compressed_read(
        q, q_seq, q_pos, world.block_table, world.comp_k, world.comp_v, world.raw_k, world.raw_v
    )
    sel = reference_indexer_topk(q, q_seq, q_pos, world.block_table, world.idx_k, top, C)
    sparse = reference_sparse_read(
        q, q_seq, q_pos, world.block_table, sel, world.comp_k, world.comp_v, world.raw_k, world.raw_v
    )
    win = reference_window_read(q, q_seq, q_pos, world.block_table, world.raw_k, world.raw_v, window)
    for n in range(q.shape[0]):
        s, t = int(q_seq[n]), int(q_pos[n])
        k, v, bias = world.dense_k[s], world.dense_v[s], world.pool_bias
        want_sel = dense_selection(q[n], t, k, v, bias, top)
        assert sel[n].tolist() == want_sel + [-1] * (top - len(want_sel))
        assert torch.allclose(comp[n], dense_compressed(q[n], t, k, v, bias), atol=ATOL)
        assert torch.allclose(sparse[n], dense_sparse(q[n], t, k, v, bias, top), atol=ATOL)
        assert torch.allclose(win[n], dense_window(q[n], t, k, v, window), atol=ATOL)


def test_reference_sparse_with_all_pages_equals_compressed(make_world) -> None:
    """k >= bt selects every complete page: the sparse layer degenerates to the compressed one."""
    world = make_world([23, 8], C=4, Hkv=2, D=16)
    q, q_seq, q_pos = world.prefill_queries(4)
    sel = reference_indexer_topk(q, q_seq, q_pos, world.block_table, world.idx_k, 64, world.C)
    sparse = reference_sparse_read(
        q, q_seq, q_pos, world.block_table, sel, world.comp_k, world.comp_v, world.raw_k, world.raw_v
    )
    comp = reference_compressed_read(
        q, q_seq, q_pos, world.block_table, world.comp_k, world.comp_v, world.raw_k, world.raw_v
    )
    assert torch.allclose(sparse, comp, atol=ATOL)


def test_reference_window_covering_everything_is_full_causal_attention(make_world) -> None:
    world = make_world([10], C=3, Hkv=1, D=8)
    q, q_seq, q_pos = world.prefill_queries(2)
    win = reference_window_read(q, q_seq, q_pos, world.block_table, world.raw_k, world.raw_v, 1000)
    k, v = world.dense_k[0], world.dense_v[0]
    for n in range(q.shape[0]):
        t = int(q_pos[n])
        assert torch.allclose(win[n], dense_attend(q[n], k[: t + 1], v[: t + 1]), atol=ATOL)


def test_reference_topk_ties_break_to_lower_block() -> None:
    idx_k = torch.zeros(6, 4)
    idx_k[:, 0] = torch.tensor([1.0, 3.0, 3.0, 2.0, 3.0, 0.0])
    block_table = torch.tensor([[5, 4, 3, 2, 1, 0]], dtype=torch.int32)  # block b -> page 5 - b
    q = torch.zeros(1, 2, 4)
    q[0, :, 0] = 1.0
    one = torch.tensor([0], dtype=torch.int32)
    sel = reference_indexer_topk(q, one, torch.tensor([23], dtype=torch.int32), block_table, idx_k, 4, 4)
    # bt = 23 // 4 = 5; scores by block: b0 0, b1 3, b2 2, b3 3, b4 3 (b5 not complete) -> 1, 3, 4, 2
    assert sel.tolist() == [[1, 3, 4, 2]]


def test_reference_page_copy_round_trip() -> None:
    pool = torch.randn(7, 3, 2)
    ids = torch.tensor([6, 0, 3])
    staging = reference_gather_pages(pool, ids)
    assert torch.equal(staging[1], pool[0])
    target = torch.zeros_like(pool)
    reference_scatter_pages(staging, target, ids)
    assert torch.equal(target[ids], pool[ids])
    assert target[[1, 2, 4, 5]].abs().sum() == 0
