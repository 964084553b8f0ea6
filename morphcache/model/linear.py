"""One linear-attention layer's mixing: gates, the gated delta rule, and the gated read-out.

::

    x_normed ─┬─ qkv ── q, k ── unit q^, k^ ──┐
              ├─ decay g, write strength beta ─┼─ delta rule (from state S) ── o ── gated norm ── out
              └────────────── v ───────────────┘                └── S' (the layer's new state)

The golden forward runs the rule token by token from a zero state over the whole sequence; the
incremental reference and the training forward run its chunked form from the state they carry.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from morphcache.model.config import ModelConfig
from morphcache.model.delta import delta_rule_chunked, delta_rule_recurrent
from morphcache.model.layers import HybridLayer

Rule = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


def zero_state(config: ModelConfig, device: torch.device, *lead: int) -> Tensor:
    """The state of a linear layer before any token: zeros [*lead, H, D, D]."""
    return torch.zeros(*lead, config.n_kv_heads, config.head_dim, config.head_dim, device=device)


def rule_inputs(layer: HybridLayer, x_normed: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """What the delta rule consumes for normed rows [.., T, d_model]: q^, k^, v [.., T, H, D], g, beta [.., T, H]."""
    gates = layer.delta
    q, k, v = layer.qkv(x_normed)
    qr, kr = gates.rule_inputs(q, k)
    return qr, kr, v, gates.decay(x_normed), gates.beta(x_normed)


def linear_mix(
    layer: HybridLayer, x_normed: Tensor, state: Tensor, rule: Rule = delta_rule_chunked
) -> tuple[Tensor, Tensor]:
    """The layer's mixed rows [.., T, H, D] (before out_proj) and its state after them.

    state [.., H, D, D] is the state before the first row; it is not modified.
    """
    qr, kr, v, g, beta = rule_inputs(layer, x_normed)
    o, new_state = rule(qr, kr, v, g, beta, state)
    return layer.delta.output(o, x_normed), new_state


def golden_linear(layer: HybridLayer, x_normed: Tensor) -> Tensor:
    """The definition: the recurrent rule, one token at a time from a zero state over all rows [T, d_model]."""
    state = zero_state(layer.config, x_normed.device)
    out, _ = linear_mix(layer, x_normed, state, delta_rule_recurrent)
    return out
