"""The data plane: page payloads through gather/scatter, copy-on-write prefixes, compression,
generations, window release and page copies (no read kernels, fast)."""

from __future__ import annotations

import torch
from eng_helpers import CFG

from morphcache.engine import PagePools, TensorPageStore
from morphcache.engine.pools import KINDS
from morphcache.model import HybridModel, compress_pages
from morphcache.runtime.store import checksum


def _store(model: HybridModel, slots: int = 6) -> TensorPageStore:
    store = TensorPageStore(PagePools(CFG, slots), model)
    g = torch.Generator().manual_seed(7)
    for t in store.pools.stacked.values():
        t.copy_(torch.randn(t.shape, generator=g))
    return store


def _page(store: TensorPageStore, slot: int) -> dict[str, torch.Tensor]:
    return {k: store.pools.stacked[k][:, slot].clone() for k in KINDS}


def test_payload_round_trip_carries_every_layer(model: HybridModel) -> None:
    store = _store(model)
    data = store.read(2)
    assert len(data) == store.page_bytes == store.pools.page_bytes
    before = _page(store, 4)
    store.write(4, data)
    after = _page(store, 4)
    src = _page(store, 2)
    for k in KINDS:
        assert torch.equal(after[k], src[k]) and not torch.equal(before[k], after[k])
    assert checksum(store.read(4)) == checksum(data)


def test_short_payload_is_zero_padded_and_fails_the_checksum(model: HybridModel) -> None:
    store = _store(model)
    data = store.read(1)
    store.write(3, data[: len(data) // 2])
    assert checksum(store.read(3)) != checksum(data)
    assert float(store.pools.stacked["idx_k"][:, 3].abs().sum()) == 0.0


def test_prefix_copy_on_write_moves_only_the_first_tokens(model: HybridModel) -> None:
    store = _store(model)
    n = 5
    data = store.read_prefix(1, n)
    assert len(data) == n * store.pools.token_bytes
    before = _page(store, 5)
    store.write_prefix(5, n, data)
    raw_k = store.pools.stacked["raw_k"]
    assert torch.equal(raw_k[:, 5, :n], raw_k[:, 1, :n])
    assert torch.equal(raw_k[:, 5, n:], before["raw_k"][:, n:])
    assert torch.equal(store.pools.stacked["comp_k"][:, 5], before["comp_k"])


def test_compress_matches_the_model_and_skips_fresh_pages(model: HybridModel) -> None:
    store = _store(model)
    store.compress(0)
    for layer in store.pools.compressing:
        lp = store.pools.layers[layer]
        ref = compress_pages(lp.raw_k[0], lp.raw_v[0], model.layers[layer].pool_bias)
        assert lp.comp_k is not None and lp.idx_k is not None
        assert torch.allclose(lp.comp_k[0], ref.ck[0], atol=1e-6)
        assert torch.allclose(lp.idx_k[0], ref.ik[0], atol=1e-6)
    launches = store.compress_launches
    store.compress(0)
    assert store.compress_launches == launches  # fresh: nothing to do
    store.write_tokens(0, 0, 3, [1, 2])
    store.compress(0)
    assert store.compress_launches == launches + len(store.pools.compressing)


def test_generation_table_follows_the_runtime(model: HybridModel) -> None:
    store = _store(model)
    store.set_generation(3, 7)
    assert store.pools.gen_table.tolist() == [0, 0, 0, 7, 0, 0]


def test_window_release_zeroes_only_window_layers(model: HybridModel) -> None:
    store = _store(model)
    before = _page(store, 2)
    assert store.release_window(2) and not store.release_window(2)
    raw_k = store.pools.stacked["raw_k"]
    for layer in range(CFG.n_layers):
        if layer in store.pools.window_layers:
            assert float(raw_k[layer, 2].abs().sum()) == 0.0
        else:
            assert torch.equal(raw_k[layer, 2], before["raw_k"][layer])
    store.write_tokens(2, 0, 0, [1])
    assert store.release_window(2)  # rewritten, so released again


def test_page_copies_read_all_sources_before_writing(model: HybridModel) -> None:
    store = _store(model)
    a, b = _page(store, 0), _page(store, 1)
    store.copy_pages([0, 1], [1, 2])  # slot 1 is both a source and a destination
    for k in KINDS:
        assert torch.equal(store.pools.stacked[k][:, 1], a[k])
        assert torch.equal(store.pools.stacked[k][:, 2], b[k])
