"""Plain-torch incremental reference: the model run chunk by chunk over a minimal per-layer state.

It uses the same position-wise blocks as the golden forward and keeps, per layer, only what later
queries can still see (no paging, plain tensors). After `length` tokens (C = 4, W = 6, length 10):

::

     positions       0 1 2 3 | 4 5 6 7 | 8 9
     compressed/sparse layer:
       pages         [c0]      [c1]                one compressed entry per complete page
       raw                               8 9       raw_start = (length // C) * C = 8
     window layer:
       raw                         5 6 7 | 8 9     raw_start = max(0, length - (W - 1)) = 5
     linear layer:
       recurrent     S_10                          one state [H, D, D]; no per-token KV

A new chunk appends its raw k/v, compresses the pages it completes (before attending: a query in
a later page of the same chunk sees them), attends, then drops raw rows no later query can see;
a linear layer runs the chunked delta rule from its state. Equality with the golden forward for any
chunking shows the blocks compose causally and that this state suffices.

Prefix reuse of a linear layer (docs/model-math.md, "Recovering recurrent state"): a state can
`drop_recurrent` (a prefix hit whose attention KV is exact but whose recurrent states are not
there), take a `checkpoint` of its recurrent states, and `replay` the last n positions of its prefix
to rebuild them, from zero (Tail-Replay, approximate) or from a checkpoint taken n positions earlier
(exact)::

     positions   0 ............................ P-n ........ P-1 | P ...
     attention   exact KV held for all of them (read, not rewritten, by the replay)
     linear      S = 0 (or checkpoint at P-n) -> run P-n .. P-1 -> S_P (approximate / exact)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from morphcache.model.attention import masked_attention
from morphcache.model.compression import (
    CompressedPages,
    compress_pages,
    concat_compressed,
    empty_compressed,
)
from morphcache.model.config import LayerKind, ModelConfig
from morphcache.model.golden import routed_pages
from morphcache.model.hybrid import HybridModel
from morphcache.model.layers import HybridLayer
from morphcache.model.linear import linear_mix, zero_state
from morphcache.model.pages import complete_pages, compressed_pages, tail_positions, window_positions
from morphcache.model.routing import indexer_query


@dataclass
class LayerState:
    """What one layer keeps between chunks.

    raw_k, raw_v: [n, Hkv, D], raw k/v of positions raw_start .. raw_start + n - 1.
    pages: compressed entries of pages 0 .. n_pages-1 (always empty for window layers).
    recurrent: the state [H, D, D] of a linear layer after all tokens so far (None for the other
    kinds, and for a linear layer whose state was dropped). Linear layers hold no raw k/v.
    Tensors are never written in place (updates rebind them), so forks may share them.
    """

    kind: LayerKind
    raw_start: int
    raw_k: Tensor
    raw_v: Tensor
    pages: CompressedPages
    recurrent: Tensor | None = None

    @property
    def n_pages(self) -> int:
        return int(self.pages.ck.shape[0])

    @property
    def raw_end(self) -> int:
        """One past the last raw position held."""
        return self.raw_start + int(self.raw_k.shape[0])


def _empty_state(kind: LayerKind, config: ModelConfig, device: torch.device) -> LayerState:
    raw = torch.zeros(0, config.n_kv_heads, config.head_dim, device=device)
    recurrent = zero_state(config, device) if kind.recurrent else None
    pages = empty_compressed(config.n_kv_heads, config.head_dim, device)
    return LayerState(kind, 0, raw, raw.clone(), pages, recurrent)


@dataclass(frozen=True)
class RecurrentCheckpoint:
    """The recurrent states of every linear layer after `position` tokens (in layer order)."""

    position: int
    states: tuple[Tensor, ...]

    @property
    def nbytes(self) -> int:
        """Bytes the checkpoint holds."""
        return sum(s.numel() * s.element_size() for s in self.states)


class IncrementalState:
    """A sequence being fed to the model chunk by chunk; `extend` returns the new rows' logits."""

    def __init__(self, model: HybridModel) -> None:
        self.model = model
        self.config = model.config
        self.length = 0
        self.tokens = torch.zeros(0, dtype=torch.long, device=model.device)
        self.layers = [_empty_state(kind, self.config, model.device) for kind in self.config.layer_kinds]

    def extend(self, tokens: Sequence[int] | Tensor) -> Tensor:
        """Append tokens [n] at positions length .. length+n-1; return their logits [n, vocab]."""
        tok = self.model.token_tensor(tokens)
        for i in self.config.linear_layers:
            if self.layers[i].recurrent is None:
                raise RuntimeError(f"layer {i}: recurrent state missing (dropped): replay it before extending")
        logits = self._run(tok, self.length, append=True, upto=self.config.n_layers)
        assert logits is not None
        self.tokens = torch.cat([self.tokens, tok])
        self.length += int(tok.shape[0])
        return logits

    def fork(self) -> IncrementalState:
        """An independent copy (tensors are shared: no state update writes a tensor in place)."""
        other = copy.copy(self)
        other.layers = [copy.copy(state) for state in self.layers]
        return other

    def drop_recurrent(self) -> None:
        """Forget every linear layer's state (what a prefix hit without recurrent checkpoints has)."""
        for i in self.config.linear_layers:
            self.layers[i].recurrent = None

    def checkpoint(self) -> RecurrentCheckpoint:
        """The linear layers' states now (position = length); RuntimeError if one was dropped."""
        states = []
        for i in self.config.linear_layers:
            state = self.layers[i].recurrent
            if state is None:
                raise RuntimeError(f"layer {i}: recurrent state missing (dropped): nothing to checkpoint")
            states.append(state)
        return RecurrentCheckpoint(self.length, tuple(states))

    def replay(self, n: int, start: RecurrentCheckpoint | None = None) -> int:
        """Rebuild every linear layer's state by running positions length-n .. length-1 again.

        Each linear layer starts from a zero state (start None: Tail-Replay) or from `start`, which
        must have been taken at position length-n (then the result is exact). Attention layers read
        the KV they hold and are not rewritten; layers after the last linear one are not run.
        Returns the work done in token-layers: n * (index of the last linear layer + 1).
        """
        if not 0 <= n <= self.length:
            raise ValueError(f"replay length must be in 0..{self.length}, got {n}")
        linear = self.config.linear_layers
        if start is not None and (start.position != self.length - n or len(start.states) != len(linear)):
            raise ValueError(
                f"checkpoint at {start.position} with {len(start.states)} states cannot start a replay of "
                f"positions {self.length - n}..{self.length - 1} over {len(linear)} linear layers"
            )
        for j, i in enumerate(linear):
            self.layers[i].recurrent = start.states[j] if start is not None else zero_state(
                self.config, self.model.device
            )
        if not linear or n == 0:
            return 0
        upto = linear[-1] + 1
        self._run(self.tokens[self.length - n :], self.length - n, append=False, upto=upto)
        return n * upto

    def _run(self, tok: Tensor, t0: int, *, append: bool, upto: int) -> Tensor | None:
        """Run tokens tok at positions t0.. through layers 0..upto-1; logits if all layers ran.

        append: attention layers add the rows' k/v to their state (else they only read it).
        """
        model = self.model
        with torch.no_grad():
            x = model.embed(tok)
            for layer, state in zip(model.layers[:upto], self.layers[:upto], strict=True):
                x_normed = layer.attn_norm(x)
                if layer.kind.recurrent:
                    assert state.recurrent is not None
                    mixed, state.recurrent = linear_mix(layer, x_normed, state.recurrent)
                else:
                    mixed = self._layer_attention(layer, state, x_normed, t0, append)
                x = layer.residual_mlp(x + layer.out_proj(mixed))
            return model.head(x) if upto == len(model.layers) else None

    def _layer_attention(
        self, layer: HybridLayer, state: LayerState, x_normed: Tensor, t0: int, append: bool
    ) -> Tensor:
        """Attention output [n, Hq, D] of rows at positions t0..; if append, updates state to cover them."""
        c = self.config
        n = x_normed.shape[0]
        t1 = t0 + n
        q, k, v = layer.qkv(x_normed)
        if append:
            if state.raw_end != t0:
                raise RuntimeError(f"layer state ends at {state.raw_end}, sequence at {t0}")
            state.raw_k = torch.cat([state.raw_k, k])
            state.raw_v = torch.cat([state.raw_v, v])
        elif t1 > state.raw_end:
            raise RuntimeError(f"layer state ends at {state.raw_end}: cannot read up to {t1 - 1}")

        if layer.kind.compresses:
            done, target = state.n_pages, complete_pages(t1, c.page_size)
            if append and target > done:
                lo, hi = done * c.page_size - state.raw_start, target * c.page_size - state.raw_start
                fresh = compress_pages(state.raw_k[lo:hi], state.raw_v[lo:hi], layer.pool_bias)
                state.pages = concat_compressed(state.pages, fresh)
            keys = torch.cat([state.pages.ck, state.raw_k])
            vals = torch.cat([state.pages.cv, state.raw_v])
            n_comp = state.n_pages
            qi = indexer_query(q)
        else:
            keys, vals, n_comp = state.raw_k, state.raw_v, 0

        visible = torch.zeros(n, keys.shape[0], dtype=torch.bool, device=q.device)
        for i, t in enumerate(range(t0, t1)):
            if layer.kind is LayerKind.WINDOW:
                raw = window_positions(t, c.window)
            else:
                raw = tail_positions(t, c.page_size)
                if layer.kind is LayerKind.SPARSE:
                    pages: Sequence[int] = routed_pages(qi[i], state.pages.ik, t, c)
                else:
                    pages = compressed_pages(t, c.page_size)
                for b in pages:
                    visible[i, b] = True
            if raw.start < state.raw_start:
                raise RuntimeError(f"position {raw.start} was dropped from the {layer.kind.value} state")
            visible[i, n_comp + raw.start - state.raw_start : n_comp + raw.stop - state.raw_start] = True
        out = masked_attention(q, keys, vals, visible, c.scale)
        if not append:
            return out

        keep_from = (
            max(0, t1 - (c.window - 1))
            if layer.kind is LayerKind.WINDOW
            else complete_pages(t1, c.page_size) * c.page_size
        )
        drop = keep_from - state.raw_start
        state.raw_k, state.raw_v, state.raw_start = state.raw_k[drop:], state.raw_v[drop:], keep_from
        return out


def chunk_sizes(total: int, chunks: int | Sequence[int]) -> list[int]:
    """Chunk lengths for `total` tokens: a fixed size (last chunk shorter), or explicit sizes."""
    if isinstance(chunks, int):
        if chunks < 1:
            raise ValueError(f"chunk size must be >= 1, got {chunks}")
        return [min(chunks, total - lo) for lo in range(0, total, chunks)]
    sizes = list(chunks)
    if any(s < 0 for s in sizes) or sum(sizes) != total:
        raise ValueError(f"chunk sizes {sizes} do not split {total} tokens")
    return sizes


def incremental_logits(
    model: HybridModel, tokens: Sequence[int] | Tensor, chunks: int | Sequence[int]
) -> Tensor:
    """Logits [T, vocab] computed chunk by chunk through an IncrementalState.

    chunks: a chunk size, or the explicit list of chunk lengths (summing to T).
    """
    tok = model.token_tensor(tokens)
    state = IncrementalState(model)
    rows: list[Tensor] = []
    lo = 0
    for size in chunk_sizes(int(tok.shape[0]), chunks):
        rows.append(state.extend(tok[lo : lo + size]))
        lo += size
    if not rows:
        return torch.zeros(0, model.config.vocab_size, device=model.device)
    return torch.cat(rows)
