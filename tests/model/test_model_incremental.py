"""The plain-torch incremental reference equals the golden forward for any chunking."""

from __future__ import annotations

import random

import pytest
import torch

from morphcache.model import HybridModel, IncrementalState, LayerKind, ModelConfig, incremental_logits
from morphcache.model.incremental import chunk_sizes

CFG = ModelConfig()
C, W = CFG.page_size, CFG.window
LENGTHS = [1, C - 1, C, C + 1, 3 * C + 5, 100]


@pytest.fixture(scope="module")
def model() -> HybridModel:
    return HybridModel(CFG, seed=0)


def _tokens(n: int) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(n))


def _random_chunks(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    sizes = []
    while n > 0:
        size = min(n, rng.randint(1, 2 * C + 3))
        sizes.append(size)
        n -= size
    return sizes


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("chunking", ["1", "3", "C-1", "C", "C+1", "all", "random"])
def test_incremental_equals_golden(model: HybridModel, length: int, chunking: str) -> None:
    toks = _tokens(length)
    fixed = {"1": 1, "3": 3, "C-1": C - 1, "C": C, "C+1": C + 1, "all": length}
    chunks: int | list[int] = _random_chunks(length, seed=length) if chunking == "random" else fixed[chunking]
    got = incremental_logits(model, toks, chunks)
    want = model.golden_logits(toks)
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= 1e-4


def test_state_keeps_only_what_later_queries_see(model: HybridModel) -> None:
    state = IncrementalState(model)
    toks = _tokens(100).tolist()
    for lo, size in [(0, 5), (5, 40), (45, 1), (46, 54)]:
        state.extend(toks[lo : lo + size])
        n = lo + size
        assert state.length == n
        for layer in state.layers:
            assert layer.raw_end == n
            if layer.kind is LayerKind.WINDOW:
                assert layer.raw_start == max(0, n - (W - 1)) and layer.n_pages == 0
            else:
                assert layer.raw_start == (n // C) * C and layer.n_pages == n // C


def test_extend_with_no_tokens_is_a_no_op(model: HybridModel) -> None:
    state = IncrementalState(model)
    assert state.extend([]).shape == (0, 256)
    assert state.extend([7, 8]).shape == (2, 256)
    assert incremental_logits(model, [], 4).shape == (0, 256)


def test_chunk_sizes() -> None:
    assert chunk_sizes(10, 4) == [4, 4, 2]
    assert chunk_sizes(0, 4) == []
    assert chunk_sizes(5, [2, 0, 3]) == [2, 0, 3]
    with pytest.raises(ValueError, match="do not split"):
        chunk_sizes(5, [2, 2])
    with pytest.raises(ValueError, match=">= 1"):
        chunk_sizes(5, 0)
