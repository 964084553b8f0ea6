"""Building blocks against the literal formulas of docs/model-math.md."""

from __future__ import annotations

import math

import pytest
import torch

from morphcache.model import (
    LayerKind,
    ModelConfig,
    compress_pages,
    compressed_pages,
    masked_attention,
    page_of,
    select_pages,
    tail_positions,
    window_positions,
)


def test_page_ranges_match_the_contract_diagram() -> None:
    # C = 4, W = 6, query at t = 10 (docs/model-math.md)
    assert page_of(10, 4) == 2
    assert list(compressed_pages(10, 4)) == [0, 1]
    assert list(tail_positions(10, 4)) == [8, 9, 10]
    assert list(window_positions(10, 6)) == [5, 6, 7, 8, 9, 10]
    assert list(tail_positions(8, 4)) == [8]  # first token of a page: tail is itself only
    assert list(compressed_pages(3, 4)) == []
    assert list(window_positions(2, 6)) == [0, 1, 2]


def test_compress_pages_matches_elementwise_formula() -> None:
    gen = torch.Generator().manual_seed(3)
    c, hkv, d, n_pages = 4, 2, 3, 2
    k = torch.randn(n_pages * c, hkv, d, generator=gen)
    v = torch.randn(n_pages * c, hkv, d, generator=gen)
    bias = torch.randn(c, hkv, d, generator=gen)
    got = compress_pages(k, v, bias)
    for b in range(n_pages):
        for g in range(hkv):
            for ch in range(d):
                logits = [float(k[b * c + i, g, ch] + bias[i, g, ch]) for i in range(c)]
                z = sum(math.exp(x) for x in logits)
                w = [math.exp(x) / z for x in logits]
                ck = sum(w[i] * float(k[b * c + i, g, ch]) for i in range(c))
                cv = sum(w[i] * float(v[b * c + i, g, ch]) for i in range(c))
                assert got.ck[b, g, ch].item() == pytest.approx(ck, abs=1e-5)
                assert got.cv[b, g, ch].item() == pytest.approx(cv, abs=1e-5)
        assert torch.allclose(got.ik[b], got.ck[b].mean(dim=0))


def test_compress_pages_rejects_partial_pages() -> None:
    with pytest.raises(ValueError, match="whole number of pages"):
        compress_pages(torch.zeros(5, 2, 3), torch.zeros(5, 2, 3), torch.zeros(4, 2, 3))


def test_select_pages_order_ties_and_padding() -> None:
    scores = torch.tensor([0.5, 2.0, 0.5, 3.0, 2.0])
    assert select_pages(scores, 2).tolist() == [3, 1]
    assert select_pages(scores, 4).tolist() == [3, 1, 4, 0]  # ties: lower page index first
    assert select_pages(torch.tensor([1.0, 1.0]), 2).tolist() == [0, 1]
    assert select_pages(torch.tensor([0.1]), 3).tolist() == [0, -1, -1]
    assert select_pages(torch.zeros(0), 2).tolist() == [-1, -1]


def test_masked_attention_gqa_matches_per_head_softmax() -> None:
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(3, 4, 5, generator=gen)
    k = torch.randn(6, 2, 5, generator=gen)
    v = torch.randn(6, 2, 5, generator=gen)
    visible = torch.tensor([[1, 0, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    out = masked_attention(q, k, v, visible, 0.3)
    for t in range(3):
        idx = visible[t].nonzero().flatten()
        for h in range(4):
            g = h // 2
            p = torch.softmax(0.3 * (k[idx, g] @ q[t, h]), dim=0)
            assert torch.allclose(out[t, h], p @ v[idx, g], atol=1e-6)


def test_masked_attention_requires_a_visible_key() -> None:
    with pytest.raises(ValueError, match="at least one key"):
        masked_attention(torch.zeros(1, 2, 2), torch.zeros(1, 1, 2), torch.zeros(1, 1, 2),
                         torch.zeros(1, 1, dtype=torch.bool), 1.0)


def test_config_defaults_and_validation() -> None:
    c = ModelConfig()
    assert (c.vocab_size, c.d_model, c.n_q_heads, c.n_kv_heads, c.head_dim) == (256, 64, 4, 2, 16)
    assert (c.page_size, c.window, c.top_k, c.mlp_hidden, c.n_layers, c.group_size) == (16, 48, 2, 128, 6, 2)
    assert [k.value for k in c.layer_kinds] == [
        "compressed", "window", "sparse", "compressed", "window", "sparse"
    ]
    assert c.scale == pytest.approx(0.25)
    with pytest.raises(ValueError, match="multiple"):
        ModelConfig(n_q_heads=3)
    with pytest.raises(ValueError, match="page_size"):
        ModelConfig(page_size=0)
    with pytest.raises(ValueError, match="at least one"):
        ModelConfig(layer_kinds=())
    with pytest.raises(TypeError):
        ModelConfig(layer_kinds=("window",))  # type: ignore[arg-type]
    assert LayerKind.SPARSE.compresses and not LayerKind.WINDOW.compresses
