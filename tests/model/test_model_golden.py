"""The golden forward: determinism, causality, and each layer kind's visibility rule."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from morphcache.model import (
    HybridModel,
    LayerKind,
    ModelConfig,
    compress_pages,
    golden_attention,
    golden_logits,
    indexer_query,
    select_pages,
)

CFG = ModelConfig()
C, W = CFG.page_size, CFG.window


def _tokens(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model() -> HybridModel:
    return HybridModel(CFG, seed=0)


def test_same_seed_same_weights_and_logits(model: HybridModel) -> None:
    other = HybridModel(CFG, seed=0)
    for (name, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    toks = _tokens(40)
    assert torch.equal(model.golden_logits(toks), other.golden_logits(toks))
    assert not torch.equal(HybridModel(CFG, seed=1).embedding, model.embedding)


def test_weights_do_not_depend_on_window_or_top_k(model: HybridModel) -> None:
    other = HybridModel(dataclasses.replace(CFG, window=7, top_k=5), seed=0)
    for (name, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_shapes_and_building_blocks(model: HybridModel) -> None:
    toks = [1, 2, 3, 250]
    assert model.golden_logits(toks).shape == (4, 256)
    assert golden_logits(model, []).shape == (0, 256)
    layer = model.layers[0]
    q, k, v = layer.qkv(layer.attn_norm(model.embed(toks)))
    assert q.shape == (4, 4, 16) and k.shape == (4, 2, 16) and v.shape == (4, 2, 16)
    assert layer.pool_bias.shape == (C, 2, 16)
    with pytest.raises(ValueError, match="no pool_bias"):
        _ = model.layers[1].pool_bias
    assert [layer.kind for layer in model.layers] == list(CFG.layer_kinds)
    with pytest.raises(ValueError, match="token ids"):
        model.golden_logits([256])
    with pytest.raises(ValueError, match="1-D"):
        model.golden_logits(torch.tensor([[1, 2]]))


@pytest.mark.parametrize("prefix", [1, C - 1, C, C + 1, 3 * C + 5, 70])
def test_causality_prefix_logits_are_rows_of_longer(model: HybridModel, prefix: int) -> None:
    toks = _tokens(100)
    full = model.golden_logits(toks)
    assert torch.allclose(model.golden_logits(toks[:prefix]), full[:prefix], atol=1e-5)


def _qkv(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n, CFG.n_q_heads, CFG.head_dim, generator=gen)
    k = torch.randn(n, CFG.n_kv_heads, CFG.head_dim, generator=gen)
    v = torch.randn(n, CFG.n_kv_heads, CFG.head_dim, generator=gen)
    bias = torch.randn(C, CFG.n_kv_heads, CFG.head_dim, generator=gen)
    return q, k, v, bias


def _one_query(q_t: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
    """Literal contract for one query: one softmax over the listed keys, per query head."""
    out = torch.empty_like(q_t)
    for h in range(CFG.n_q_heads):
        g = h // CFG.group_size
        p = torch.softmax(CFG.scale * (keys[:, g] @ q_t[h]), dim=0)
        out[h] = p @ vals[:, g]
    return out


@pytest.mark.parametrize("kind", [k for k in LayerKind if not k.recurrent])  # linear layers: test_model_gdn.py
def test_golden_attention_rows_match_the_key_lists(kind: LayerKind) -> None:
    n = 5 * C + 3
    q, k, v, bias = _qkv(5, n)
    out = golden_attention(kind, q, k, v, bias, CFG)
    comp = compress_pages(k[: 5 * C], v[: 5 * C], bias)
    qi = indexer_query(q)
    for t in [0, 1, C - 1, C, 2 * C + 7, W - 1, W, 4 * C, n - 1]:
        bt = t // C
        if kind is LayerKind.WINDOW:
            lo = max(0, t - W + 1)
            keys, vals = k[lo : t + 1], v[lo : t + 1]
        else:
            if kind is LayerKind.SPARSE:
                pages = [b for b in select_pages(comp.ik[:bt] @ qi[t], CFG.top_k).tolist() if b >= 0]
            else:
                pages = list(range(bt))
            keys = torch.cat([comp.ck[pages], k[bt * C : t + 1]])
            vals = torch.cat([comp.cv[pages], v[bt * C : t + 1]])
        assert torch.allclose(out[t], _one_query(q[t], keys, vals), atol=1e-5), t


def test_window_attention_ignores_keys_older_than_w() -> None:
    n = 3 * W
    q, k, v, _ = _qkv(6, n)
    base = golden_attention(LayerKind.WINDOW, q, k, v, None, CFG)
    t = n - 1
    k2, v2 = k.clone(), v.clone()
    k2[: t - W + 1] += 10.0
    v2[: t - W + 1] -= 10.0
    moved = golden_attention(LayerKind.WINDOW, q, k2, v2, None, CFG)
    assert torch.equal(moved[t], base[t])
    k2[t - W + 1] += 1.0  # the oldest position still in the window does count
    assert not torch.allclose(golden_attention(LayerKind.WINDOW, q, k2, v, None, CFG)[t], base[t])


def test_window_only_model_forgets_tokens_older_than_w() -> None:
    cfg = dataclasses.replace(CFG, layer_kinds=(LayerKind.WINDOW,))
    m = HybridModel(cfg, seed=2)
    toks = _tokens(2 * W)
    t = len(toks) - 1
    base = m.golden_logits(toks)[t]
    old = toks.clone()
    old[t - W] = (int(old[t - W]) + 1) % 256
    assert torch.equal(m.golden_logits(old)[t], base)
    edge = toks.clone()
    edge[t - W + 1] = (int(edge[t - W + 1]) + 1) % 256
    assert not torch.allclose(m.golden_logits(edge)[t], base)


def test_sparse_routing_selects_fewer_pages_than_available(model: HybridModel) -> None:
    toks = _tokens(100)
    small = model.golden_logits(toks)  # top_k = 2
    wide = HybridModel(dataclasses.replace(CFG, top_k=100), seed=0).golden_logits(toks)
    # a query in page bt has bt candidate pages: with bt <= 2 both configs take them all
    assert torch.allclose(small[: 3 * C], wide[: 3 * C], atol=1e-6)
    assert (small[3 * C :] - wide[3 * C :]).abs().max() > 1e-3


def test_sparse_with_large_top_k_equals_compressed() -> None:
    kinds = (LayerKind.SPARSE, LayerKind.WINDOW, LayerKind.SPARSE)
    sparse = HybridModel(ModelConfig(layer_kinds=kinds, top_k=64), seed=4)
    dense = HybridModel(
        ModelConfig(layer_kinds=tuple(LayerKind.COMPRESSED if k is LayerKind.SPARSE else k for k in kinds)),
        seed=4,
    )
    toks = _tokens(90, seed=9)
    assert torch.allclose(sparse.golden_logits(toks), dense.golden_logits(toks), atol=1e-6)
