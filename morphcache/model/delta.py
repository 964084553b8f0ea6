"""The gated delta rule (docs/model-math.md, "Linear-attention layer"): recurrent and chunked forms.

Per head, a state S [K, V] maps keys to values. Token t (log-decay g_t <= 0, write strength beta_t in
(0, 1), key k_t [K], value v_t [V], query q_t [K]) does::

    S_t = exp(g_t) * S_{t-1}                                      decay (forget)
    S_t = S_t + k_t (beta_t * (v_t - S_t^T k_t))^T                delta-rule write (correct the old value at k_t)
    o_t = S_t^T q_t                                               read

The chunked form computes the same thing L tokens at a time with matrix products (the state is
touched once per chunk). Inside a chunk, with G_i = g_1 + .. + g_i and gamma_i = exp(G_i)::

    M[i, j]  = exp(G_i - G_j) * (k_i . k_j)        j < i   (strictly lower)
    (I + diag(beta) M) U = diag(beta) V - diag(beta * gamma) K S_0       (unit lower triangular solve)
    O        = diag(gamma) Q S_0 + (mask_{j <= i} * exp(G_i - G_j) * Q K^T) U
    S_L      = gamma_L S_0 + (diag(exp(G_L - G)) K)^T U

Both take any leading batch dims: q, k [..., T, H, K], v [..., T, H, V], g, beta [..., T, H],
state [..., H, K, V]; they return (o [..., T, H, V], final state) and never modify their inputs.
"""

from __future__ import annotations

import torch
from torch import Tensor

DEFAULT_CHUNK = 32  # tokens per chunk of the chunked form


def _check(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor) -> None:
    lead, (t, h, dk), dv = q.shape[:-3], q.shape[-3:], v.shape[-1]
    expect = {
        "k": (k, (*lead, t, h, dk)),
        "v": (v, (*lead, t, h, dv)),
        "g": (g, (*lead, t, h)),
        "beta": (beta, (*lead, t, h)),
        "state": (state, (*lead, h, dk, dv)),
    }
    for name, (tensor, shape) in expect.items():
        if tuple(tensor.shape) != tuple(shape):
            raise ValueError(f"delta rule: {name} must be {list(shape)}, got {list(tensor.shape)}")


def delta_rule_recurrent(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor
) -> tuple[Tensor, Tensor]:
    """The definition, one token at a time (see the module docstring)."""
    _check(q, k, v, g, beta, state)
    s = state
    outs = []
    for t in range(q.shape[-3]):
        s = torch.exp(g[..., t, :])[..., None, None] * s
        predicted = torch.einsum("...hkv,...hk->...hv", s, k[..., t, :, :])
        delta = beta[..., t, :, None] * (v[..., t, :, :] - predicted)
        s = s + k[..., t, :, :, None] * delta[..., None, :]
        outs.append(torch.einsum("...hkv,...hk->...hv", s, q[..., t, :, :]))
    if not outs:
        return v.new_zeros(v.shape), s
    return torch.stack(outs, dim=-3), s


def delta_rule_chunked(
    q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, chunk: int = DEFAULT_CHUNK
) -> tuple[Tensor, Tensor]:
    """The chunked form, `chunk` tokens per step (differentiable; equal to the recurrent form)."""
    _check(q, k, v, g, beta, state)
    if chunk < 1:
        raise ValueError(f"delta rule: chunk must be >= 1, got {chunk}")
    # heads before time: [..., H, T, *]
    qh, kh, vh = q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2)
    gh, bh = g.transpose(-2, -1), beta.transpose(-2, -1)
    s = state
    outs = []
    for lo in range(0, q.shape[-3], chunk):
        hi = min(lo + chunk, q.shape[-3])
        o, s = _chunk_step(qh[..., lo:hi, :], kh[..., lo:hi, :], vh[..., lo:hi, :], gh[..., lo:hi], bh[..., lo:hi], s)
        outs.append(o)
    if not outs:
        return v.new_zeros(v.shape), s
    return torch.cat(outs, dim=-2).transpose(-3, -2), s


def _chunk_step(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, s0: Tensor) -> tuple[Tensor, Tensor]:
    """One chunk: q, k [..., H, L, K], v [..., H, L, V], g, beta [..., H, L], s0 [..., H, K, V]."""
    n = q.shape[-2]
    cum = torch.cumsum(g, dim=-1)  # G_i
    gamma = torch.exp(cum)
    idx = torch.arange(n, device=q.device)
    incl = idx[:, None] >= idx[None, :]
    strict = idx[:, None] > idx[None, :]
    diff = (cum[..., :, None] - cum[..., None, :]).masked_fill(~incl, float("-inf"))
    decay = torch.exp(diff)  # exp(G_i - G_j) for j <= i, else 0
    a = (beta[..., :, None] * decay * (k @ k.transpose(-1, -2))).masked_fill(~strict, 0.0)
    eye = torch.eye(n, device=q.device, dtype=q.dtype)
    t_inv = torch.linalg.solve_triangular(eye + a, eye.expand_as(a), upper=False, unitriangular=True)
    w = t_inv @ ((beta * gamma)[..., None] * k)
    u = t_inv @ (beta[..., None] * v) - w @ s0
    o = (gamma[..., None] * q) @ s0 + ((q @ k.transpose(-1, -2)) * decay) @ u
    last = cum[..., -1:]  # G_L
    s = torch.exp(last)[..., None] * s0 + (torch.exp(last - cum)[..., None] * k).transpose(-1, -2) @ u
    return o, s
