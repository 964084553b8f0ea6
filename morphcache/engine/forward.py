"""The cached forward: a chunk of new tokens through the model, attention and linear layers only through
the kernels.

For a chunk at positions ``start .. end-1`` of a sequence whose pages sit in GPU slots
``slots[b]`` (block b covers positions b*C .. b*C+C-1), layer by layer (``mixers.py``)::

    x ── attn_norm ──> mixer(kind) ── out_proj ──(+)── residual_mlp
                         window      store(k, v) -> slot slots[t // C], offset t % C; window_read
                         compressed  store, compress(pages the chunk completed), compressed_read
                         sparse      store, compress, indexer_topk + sparse_read
                         linear      gdn_prefill / gdn_decode on the sequence's working state slot
                                     (checkpoint after each page the chunk completes)

    C = 4, start = 6, end = 13:   | 0 1 2 3 | 4 5 6 7 | 8 9 10 11 | 12 . . . |
                                          chunk ^^^^^^^^^^^^^^^^^^^^^^
                                  completed pages: block 1 (ends at 8), block 2 (ends at 12)

``replay_chunk`` runs positions the sequence already holds through layers 0 .. (last linear layer)
to rebuild the linear layers' working state: the attention layers read the cached KV and write
nothing, later layers do not run::

    positions   0 ......... s ............ P-1 | P ...
    replay                  [ linear: state from s (zero / checkpoint) to P ]
                            [ attention: read KV of 0..t, no write          ]

Every read goes through ``ops`` under ``lease``, whose row 0 is this sequence; the position-wise
blocks are the reference model's own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from morphcache.engine.mixers import MIXERS, LayerPass, RecurrentSlot
from morphcache.engine.ops import AttentionOps
from morphcache.engine.store import TensorPageStore
from morphcache.kernels import KernelLease
from morphcache.model import HybridModel


def completed_blocks(start: int, end: int, page_size: int) -> range:
    """Blocks whose last position lies in ``start .. end-1`` (the pages a chunk completes)."""
    return range(start // page_size, end // page_size) if end > start else range(0)


def slot_mapping(positions: Tensor, slots: Sequence[int], page_size: int) -> Tensor:
    """Flat slots ``slots[t // C] * C + t % C`` of positions ``t`` (int64, for ``store``)."""
    table = torch.tensor(list(slots), dtype=torch.int64, device=positions.device)
    return table[positions // page_size] * page_size + positions % page_size


def _pass(store: TensorPageStore, ops: AttentionOps, lease: KernelLease, slots: Sequence[int], start: int,
          n: int, write: bool, recurrent: RecurrentSlot | None) -> LayerPass:
    dev = store.pools.device
    c = store.page_size
    positions = torch.arange(start, start + n, dtype=torch.int64, device=dev)
    done = tuple(slots[b] for b in completed_blocks(start, start + n, c)) if write else ()
    return LayerPass(
        store=store, ops=ops, lease=lease, slots=tuple(slots), start=start, n=n, write=write,
        recurrent=recurrent, reset=recurrent.reset if recurrent is not None else False,
        positions=positions,
        q_seq=torch.zeros(n, dtype=torch.int32, device=dev),
        q_pos=positions.to(torch.int32),
        mapping=slot_mapping(positions, slots, c) if write else positions,
        done=done,
        done_ids=torch.tensor(done, dtype=torch.int32, device=dev) if done else None,
    )


def _run(model: HybridModel, p: LayerPass, tokens: Sequence[int], upto: int) -> Tensor:
    """The residual stream after layers 0 .. upto-1 for ``tokens``."""
    x = model.embed(torch.as_tensor(list(tokens), dtype=torch.long, device=p.positions.device))
    for index, layer in enumerate(model.layers[:upto]):
        mixed = MIXERS[layer.kind](layer, index, layer.attn_norm(x), p)
        x = layer.residual_mlp(x + layer.out_proj(mixed))
    if p.recurrent is not None:
        p.recurrent.reset = False
    return x


def _check_recurrent(model: HybridModel, recurrent: RecurrentSlot | None) -> None:
    if model.config.linear_layers and recurrent is None:
        raise ValueError("the model has linear layers: the forward needs the sequence's RecurrentSlot")


def forward_chunk(model: HybridModel, store: TensorPageStore, ops: AttentionOps, lease: KernelLease,
                  slots: Sequence[int], start: int, tokens: Sequence[int],
                  recurrent: RecurrentSlot | None = None) -> Tensor:
    """Logits [n, vocab] of ``tokens`` at positions ``start .. start+n-1``.

    State: writes the chunk's raw KV into the pages ``slots`` (block order, covering every position
    up to ``start + n - 1``) in every attention layer, and the compressed entries of the pages the
    chunk completes (marked fresh in ``store``); advances the linear layers' working state in
    ``recurrent`` (from zero if ``recurrent.reset``, which is cleared) and saves checkpoints after
    the completed pages if ``recurrent.save``.  Reads only through ``ops`` under ``lease``.
    """
    _check_recurrent(model, recurrent)
    n = len(tokens)
    if n == 0:
        return torch.zeros(0, model.config.vocab_size, device=store.pools.device)
    p = _pass(store, ops, lease, slots, start, n, True, recurrent)
    with torch.no_grad(), store.lock:
        x = _run(model, p, tokens, len(model.layers))
        if p.done:
            store.mark_fresh(list(p.done))
        return model.head(x)


def replay_chunk(model: HybridModel, store: TensorPageStore, ops: AttentionOps, lease: KernelLease,
                 slots: Sequence[int], start: int, tokens: Sequence[int], recurrent: RecurrentSlot) -> int:
    """Run ``tokens`` (positions ``start ..``, already held by the sequence) through layers 0 .. (last
    linear layer) to rebuild the working state in ``recurrent``; returns the token-layers run.

    State: only the working state slot (from zero if ``recurrent.reset``); no KV, no checkpoint.
    """
    linear = model.config.linear_layers
    if not tokens or not linear:
        return 0
    upto = linear[-1] + 1
    p = _pass(store, ops, lease, slots, start, len(tokens), False, recurrent)
    with torch.no_grad(), store.lock:
        _run(model, p, tokens, upto)
    return len(tokens) * upto
