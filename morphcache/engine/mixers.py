"""How each layer kind mixes positions in the cached forward: one mixer per kind, all through ``ops``.

::

    kind         writes (a writing pass only)                   reads
    window       store(k, v) into the chunk's page slots        window_read          (lease)
    compressed   store(k, v), compress(completed pages)         compressed_read      (lease)
    sparse       store(k, v), compress(completed pages)         indexer_topk + sparse_read (lease)
    linear       the sequence's working state slot, in place:   (nothing: the state is its own)
                 gdn_prefill (a chunk, or a reset state) or
                 gdn_decode (one token); checkpoints after the
                 pages the chunk completes (``RecurrentSlot.save``)

A *replay* pass (``write=False``) runs positions the sequence already holds through the layers again
to rebuild its linear layers' state: attention layers read the cached KV and write nothing, linear
layers update the working state, no checkpoint is saved.

A new layer kind is a new mixer in ``MIXERS``; the forward loop does not change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from morphcache.engine.ops import AttentionOps
from morphcache.engine.pools import LayerPools
from morphcache.engine.states import StatePools
from morphcache.engine.store import TensorPageStore
from morphcache.kernels import KernelLease
from morphcache.model import HybridLayer, LayerKind
from morphcache.model.linear import rule_inputs


@dataclass
class RecurrentSlot:
    """A sequence's working state slot in ``states``: ``reset`` (the next pass starts every linear
    layer from the zero state) and ``save`` (writing passes save checkpoints at page boundaries)."""

    states: StatePools
    slot: int
    reset: bool = True
    save: bool = True


@dataclass(frozen=True)
class LayerPass:
    """One pass of positions ``start .. start+n-1`` of one sequence (row 0 of ``lease``) through the
    layers.  ``slots[b]`` is the GPU page slot of block b; ``done`` the slots of the pages the chunk
    completes (empty for a replay)."""

    store: TensorPageStore
    ops: AttentionOps
    lease: KernelLease
    slots: Sequence[int]
    start: int
    n: int
    write: bool
    recurrent: RecurrentSlot | None
    reset: bool
    positions: Tensor = field(repr=False)
    q_seq: Tensor = field(repr=False)
    q_pos: Tensor = field(repr=False)
    mapping: Tensor = field(repr=False)
    done: tuple[int, ...] = ()
    done_ids: Tensor | None = field(default=None, repr=False)

    @property
    def page_size(self) -> int:
        return self.store.page_size


Mixer = Callable[[HybridLayer, int, Tensor, LayerPass], Tensor]


def _window(layer: HybridLayer, index: int, x_normed: Tensor, p: LayerPass) -> Tensor:
    lp = p.store.pools.layers[index]
    q, k, v = (t.contiguous() for t in layer.qkv(x_normed))
    if p.write:
        p.ops.store(k, v, p.mapping, lp.raw_k, lp.raw_v)
    return p.ops.window_read(q, p.q_seq, p.q_pos, p.lease, lp.raw_k, lp.raw_v, p.store.pools.gen_table,
                             layer.config.window)


def _paged(layer: HybridLayer, index: int, x_normed: Tensor, p: LayerPass) -> tuple[Tensor, LayerPools]:
    """q of a compressing layer; a writing pass stores k, v and compresses the pages it completes."""
    lp = p.store.pools.layers[index]
    assert lp.comp_k is not None and lp.comp_v is not None and lp.idx_k is not None
    q, k, v = (t.contiguous() for t in layer.qkv(x_normed))
    if p.write:
        p.ops.store(k, v, p.mapping, lp.raw_k, lp.raw_v)
        if p.done_ids is not None:
            p.ops.compress(p.done_ids, lp.raw_k, lp.raw_v, layer.pool_bias, lp.comp_k, lp.comp_v, lp.idx_k)
    return q, lp


def _compressed(layer: HybridLayer, index: int, x_normed: Tensor, p: LayerPass) -> Tensor:
    q, lp = _paged(layer, index, x_normed, p)
    assert lp.comp_k is not None and lp.comp_v is not None
    return p.ops.compressed_read(q, p.q_seq, p.q_pos, p.lease, lp.comp_k, lp.comp_v, lp.raw_k, lp.raw_v,
                                 p.store.pools.gen_table)


def _sparse(layer: HybridLayer, index: int, x_normed: Tensor, p: LayerPass) -> Tensor:
    q, lp = _paged(layer, index, x_normed, p)
    assert lp.comp_k is not None and lp.comp_v is not None and lp.idx_k is not None
    cfg, gen = layer.config, p.store.pools.gen_table
    topk = p.ops.indexer_topk(q, p.q_seq, p.q_pos, p.lease, lp.idx_k, gen, cfg.top_k, cfg.page_size)
    return p.ops.sparse_read(q, p.q_seq, p.q_pos, p.lease, topk, lp.comp_k, lp.comp_v, lp.raw_k, lp.raw_v, gen)


def checkpoint_table(p: LayerPass, rec: RecurrentSlot) -> Tensor | None:
    """``gdn_prefill``'s checkpoint_slots [1, end // C]: the checkpoint row of each page the chunk
    completes, -1 elsewhere; None when nothing is saved::

        C = 4, start 6, end 13, slots [5, 9, 2, 7]:   blocks 0 1 2    completed: 1, 2
                                                      table  [-1, row(9), row(2)]
    """
    if not (p.write and rec.save and p.done):
        return None
    c = p.page_size
    end = p.start + p.n
    table = torch.full((1, end // c), -1, dtype=torch.int32, device=p.positions.device)
    for b in range(p.start // c, end // c):
        table[0, b] = rec.states.checkpoint_row(p.slots[b])
    return table


def _linear(layer: HybridLayer, index: int, x_normed: Tensor, p: LayerPass) -> Tensor:
    rec = p.recurrent
    if rec is None:
        raise ValueError(f"layer {index} is a linear layer: the pass needs the sequence's state slot")
    states = rec.states.layers[index]
    dev = p.positions.device
    q, k, v, g, beta = (t.contiguous() for t in rule_inputs(layer, x_normed))
    slot = torch.tensor([rec.slot], dtype=torch.int32, device=dev)
    if p.n == 1 and not p.reset:  # the recurrent step
        end = p.start + 1
        save = None
        if p.write and rec.save and end % p.page_size == 0:
            save = torch.tensor([rec.states.checkpoint_row(p.slots[p.start // p.page_size])], dtype=torch.int32,
                                device=dev)
        out = p.ops.gdn_decode(q, k, v, g, beta, slot, states, save)
    else:
        cu = torch.tensor([0, p.n], dtype=torch.int32, device=dev)
        start = torch.tensor([p.start], dtype=torch.int32, device=dev)
        reset = torch.tensor([int(p.reset)], dtype=torch.int32, device=dev)
        out = p.ops.gdn_prefill(q, k, v, g, beta, cu, start, slot, reset, states, p.page_size,
                                checkpoint_table(p, rec))
    return layer.delta.output(out, x_normed)


MIXERS: dict[LayerKind, Mixer] = {
    LayerKind.WINDOW: _window,
    LayerKind.COMPRESSED: _compressed,
    LayerKind.SPARSE: _sparse,
    LayerKind.LINEAR: _linear,
}
