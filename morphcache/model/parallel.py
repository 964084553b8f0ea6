"""A batched, differentiable forward over whole sequences (training and fast evaluation).

It computes what the golden forward computes (tests check they agree) for a batch of equal-length
sequences tokens [B, T], with every layer's visibility rule built as one dense mask per layer
instead of row by row, so autograd can run through it::

    compressed / sparse layer, keys = [ ck[0] .. ck[nb-1] | k[0] .. k[T-1] ]      (as in golden.py)
    window layer,              keys = [ k[0] .. k[T-1] ]
    linear layer               chunked delta rule from a zero state (delta.py)

Sparse routing selects pages (top-k of qi . ik); the selection itself carries no gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from morphcache.model.config import LayerKind, ModelConfig
from morphcache.model.hybrid import HybridModel
from morphcache.model.layers import HybridLayer
from morphcache.model.linear import linear_mix, zero_state

Mixer = Callable[[HybridLayer, Tensor], Tensor]


def _attend(q: Tensor, keys: Tensor, vals: Tensor, visible: Tensor, config: ModelConfig) -> Tensor:
    """q [B, T, Hq, D], keys/vals [B, N, Hkv, D], visible bool [B or 1, T, N] -> [B, T, Hq, D]."""
    group = config.group_size
    k = keys.repeat_interleave(group, dim=2).transpose(1, 2)
    v = vals.repeat_interleave(group, dim=2).transpose(1, 2)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k, v, attn_mask=visible.unsqueeze(1), scale=config.scale
    )
    return out.transpose(1, 2)


def _compress(k: Tensor, v: Tensor, pool_bias: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """ck, cv [B, nb, Hkv, D] and ik [B, nb, D] of the complete pages of k, v [B, T, Hkv, D]."""
    b, t, hkv, d = k.shape
    c = pool_bias.shape[0]
    nb = t // c
    kp = k[:, : nb * c].reshape(b, nb, c, hkv, d)
    vp = v[:, : nb * c].reshape(b, nb, c, hkv, d)
    w = torch.softmax(kp + pool_bias, dim=2)
    ck = (w * kp).sum(dim=2)
    return ck, (w * vp).sum(dim=2), ck.mean(dim=2)


def _window(layer: HybridLayer, x_normed: Tensor) -> Tensor:
    q, k, v = layer.qkv(x_normed)
    pos = torch.arange(q.shape[1], device=q.device)
    diff = pos[:, None] - pos[None, :]
    visible = (diff >= 0) & (diff < layer.config.window)
    return _attend(q, k, v, visible.unsqueeze(0), layer.config)


def _paged(layer: HybridLayer, x_normed: Tensor) -> Tensor:
    c = layer.config
    q, k, v = layer.qkv(x_normed)
    n_seq, t = q.shape[0], q.shape[1]
    ck, cv, ik = _compress(k, v, layer.pool_bias)
    nb = ck.shape[1]
    pos = torch.arange(t, device=q.device)
    own_page = pos // c.page_size
    earlier = torch.arange(nb, device=q.device)[None, :] < own_page[:, None]  # [T, nb]
    tail = (pos[None, :] <= pos[:, None]) & (pos[None, :] // c.page_size == own_page[:, None])  # [T, T]
    pages = earlier.unsqueeze(0).expand(n_seq, t, nb)
    if layer.kind is LayerKind.SPARSE and nb:
        with torch.no_grad():
            scores = (q.mean(dim=2) @ ik.transpose(1, 2)).masked_fill(~earlier, float("-inf"))
            order = torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., : c.top_k]
            chosen = torch.zeros_like(pages).scatter(-1, order, True) & pages
        pages = chosen
    visible = torch.cat([pages, tail.unsqueeze(0).expand(n_seq, t, t)], dim=-1)
    return _attend(q, torch.cat([ck, k], dim=1), torch.cat([cv, v], dim=1), visible, c)


def _linear(layer: HybridLayer, x_normed: Tensor) -> Tensor:
    state = zero_state(layer.config, x_normed.device, x_normed.shape[0])
    out, _ = linear_mix(layer, x_normed, state)
    return out


MIXERS: dict[LayerKind, Mixer] = {
    LayerKind.WINDOW: _window,
    LayerKind.COMPRESSED: _paged,
    LayerKind.SPARSE: _paged,
    LayerKind.LINEAR: _linear,
}


def parallel_logits(model: HybridModel, tokens: Tensor) -> Tensor:
    """Logits [B, T, vocab] of token ids [B, T]; row [b, t] depends only on tokens[b, :t+1].

    Differentiable in the model's weights when they require grad (the caller chooses no_grad).
    """
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be [B, T], got shape {tuple(tokens.shape)}")
    x = model.embedding[tokens]
    for layer in model.layers:
        mixed = MIXERS[layer.kind](layer, layer.attn_norm(x))
        x = layer.residual_mlp(x + layer.out_proj(mixed))
    return model.head(x)


def next_token_loss(model: HybridModel, tokens: Tensor) -> Tensor:
    """Mean cross-entropy (nats per token) of predicting tokens[:, 1:] from tokens[:, :-1]."""
    logits = parallel_logits(model, tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
