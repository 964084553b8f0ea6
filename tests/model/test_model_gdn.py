"""The linear-attention layer and the GDN hybrid: the delta rule's two forms, the golden forward,
the incremental and batched forwards against it, and recurrent-state recovery (checkpoint, replay)."""

from __future__ import annotations

import pytest
import torch

from morphcache.model import HybridModel, IncrementalState, LayerKind, ModelConfig, golden_attention, incremental_logits
from morphcache.model.config import GDN_HYBRID_LAYER_KINDS, model_config
from morphcache.model.delta import delta_rule_chunked, delta_rule_recurrent
from morphcache.model.parallel import parallel_logits

CFG = model_config("gdn-hybrid")
ATOL = 5e-5


def _tokens(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def model() -> HybridModel:
    return HybridModel(CFG, seed=0)


@pytest.mark.parametrize("chunk", [1, 3, 16, 64])
def test_chunked_rule_equals_recurrent_rule(chunk: int) -> None:
    gen = torch.Generator().manual_seed(chunk)
    b, t, h, dk, dv = 2, 29, 3, 5, 7
    q = torch.randn(b, t, h, dk, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(b, t, h, dk, generator=gen), dim=-1)
    v = torch.randn(b, t, h, dv, generator=gen)
    g, beta = -2 * torch.rand(b, t, h, generator=gen), torch.rand(b, t, h, generator=gen)
    s0 = torch.randn(b, h, dk, dv, generator=gen)
    o1, s1 = delta_rule_recurrent(q, k, v, g, beta, s0)
    o2, s2 = delta_rule_chunked(q, k, v, g, beta, s0, chunk=chunk)
    assert (o1 - o2).abs().max() < 1e-5 and (s1 - s2).abs().max() < 1e-5
    with pytest.raises(ValueError, match="state must be"):
        delta_rule_chunked(q, k, v, g, beta, s0[0])


def test_config_and_weights() -> None:
    assert CFG.layer_kinds == GDN_HYBRID_LAYER_KINDS and CFG.linear_layers == (0, 1, 2, 4, 5, 6)
    kinds = CFG.layer_kinds
    assert sum(k is LayerKind.LINEAR for k in kinds) == 3 * sum(k is LayerKind.WINDOW for k in kinds)
    with pytest.raises(ValueError, match="one state per head"):
        ModelConfig(layer_kinds=(LayerKind.LINEAR,))
    with pytest.raises(ValueError, match="unknown model 'x'.*gdn-hybrid"):
        model_config("x")
    plain = HybridModel(ModelConfig(), seed=0)
    assert not any("_delta" in name for name in plain.state_dict())
    gdn = HybridModel(CFG, seed=0)
    assert gdn.layers[0].delta.decay(torch.zeros(1, CFG.d_model)).max() < 0
    with pytest.raises(ValueError, match="no delta gates"):
        _ = gdn.layers[3].delta
    with pytest.raises(ValueError, match="has no attention"):
        x = torch.zeros(1, 4, 16)
        golden_attention(LayerKind.LINEAR, x, x, x, None, CFG)


def test_golden_is_causal_and_deterministic(model: HybridModel) -> None:
    toks = _tokens(48)
    full = model.golden_logits(toks)
    assert torch.equal(full, HybridModel(CFG, seed=0).golden_logits(toks))
    changed = toks.clone()
    changed[30] = (changed[30] + 1) % 256
    other = model.golden_logits(changed)
    assert torch.equal(other[:30], full[:30]) and not torch.allclose(other[30:], full[30:])


@pytest.mark.parametrize("chunks", [1, 5, 16, 33, 50])
def test_incremental_equals_golden(model: HybridModel, chunks: int) -> None:
    toks = _tokens(50, seed=chunks)
    assert (incremental_logits(model, toks, chunks) - model.golden_logits(toks)).abs().max() < ATOL


@pytest.mark.parametrize("name", ["hybrid", "gdn-hybrid"])
def test_batched_forward_equals_golden(name: str) -> None:
    m = HybridModel(model_config(name), seed=2)
    toks = torch.stack([_tokens(53, seed=s) for s in range(3)])
    got = parallel_logits(m, toks)
    for b in range(3):
        assert (got[b] - m.golden_logits(toks[b])).abs().max() < ATOL


def test_replay_from_a_checkpoint_is_exact_and_from_zero_is_tail_replay(model: HybridModel) -> None:
    toks = _tokens(90)
    cached = IncrementalState(model)
    cached.extend(toks[:32])
    ckpt = cached.checkpoint()
    cached.extend(toks[32:75])
    want = cached.fork().extend(toks[75:])

    exact = cached.fork()
    exact.drop_recurrent()
    with pytest.raises(RuntimeError, match="recurrent state missing"):
        exact.extend(toks[75:])
    assert exact.replay(75 - 32, start=ckpt) == 43 * 7  # up to the last linear layer (index 6)
    assert (exact.extend(toks[75:]) - want).abs().max() < ATOL

    whole = cached.fork()
    whole.drop_recurrent()
    whole.replay(75)  # replaying the whole prefix from zero is the full prefill again
    assert (whole.extend(toks[75:]) - want).abs().max() < ATOL

    tail = cached.fork()
    tail.drop_recurrent()
    tail.replay(10)  # Tail-Replay: approximate
    assert (tail.extend(toks[75:]) - want).abs().max() > 1e-3
    assert cached.length == 75 and cached.checkpoint().position == 75  # forks left it alone

    with pytest.raises(ValueError, match="cannot start a replay"):
        cached.fork().replay(10, start=ckpt)
    with pytest.raises(ValueError, match="replay length"):
        cached.fork().replay(76)
