"""The paged tensor pools of the data plane: every attention layer's KV pages, stacked by kind, and the
device-side generation table.

One GPU *slot* s holds one page (C tokens of one sequence) in every attention layer at once::

    raw_k[a]   [P, C, Hkv, D]   raw keys of attention layer a    (a indexes the attention layers)
    raw_v[a]   [P, C, Hkv, D]   raw values of attention layer a
    comp_k[c]  [P, Hkv, D]      compressed key of page s         (compressing layers only: c indexes them)
    comp_v[c]  [P, Hkv, D]
    idx_k[c]   [P, D]           indexer key of page s
    gen_table  [P] int32        generation of the page in slot s (published by the runtime)

A linear (recurrent) layer keeps no per-token KV, so it has no row here: its history is one state
per sequence, in the state pools (``states.py``), which are not part of a page.

Each kind is one stacked tensor ``[L, P, ...]`` so that a layer's pool is a contiguous view (what
the kernels take) and all layers' copies of one page can be moved by a single gather or scatter
on the flattened ``[L * P, ...]`` view: page s of stacked layer l is row ``l * P + s``::

    raw_k stacked    | layer 0: slot 0 .. P-1 | layer 1: slot 0 .. P-1 | ... |
    page s, all l      row s,                   row P + s,               ...

A page's *payload* (what leaves the GPU on offload) is the bytes of those rows, kind by kind, in
the order raw_k, raw_v, comp_k, comp_v, idx_k (kinds no layer has are left out: ``kinds``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from morphcache.model import LayerKind, ModelConfig

KINDS = ("raw_k", "raw_v", "comp_k", "comp_v", "idx_k")


@dataclass(frozen=True)
class LayerPools:
    """The pools one attention layer's kernels read and write (views into the stacked tensors)."""

    kind: LayerKind
    raw_k: Tensor
    raw_v: Tensor
    comp_k: Tensor | None
    comp_v: Tensor | None
    idx_k: Tensor | None


class PagePools:
    """The stacked pools of all attention layers for ``slots`` page slots, zero-initialised, on ``device``.

    ``layers`` maps a model layer index to its pools (attention layers only); ``attention`` lists
    those layers in stacking order.
    """

    def __init__(self, config: ModelConfig, slots: int, device: torch.device | str = "cpu") -> None:
        if slots < 1:
            raise ValueError(f"need at least one page slot, got {slots}")
        c = config
        self.config = config
        self.slots = slots
        self.device = torch.device(device)
        self.attention = tuple(i for i, k in enumerate(c.layer_kinds) if not k.recurrent)
        self.compressing = tuple(i for i, k in enumerate(c.layer_kinds) if k.compresses)
        self.window_layers = tuple(i for i, k in enumerate(c.layer_kinds) if k is LayerKind.WINDOW)
        n_attn, n_comp = len(self.attention), len(self.compressing)
        raw = (slots, c.page_size, c.n_kv_heads, c.head_dim)
        comp = (slots, c.n_kv_heads, c.head_dim)
        f32 = torch.float32
        dev = self.device
        self.stacked: dict[str, Tensor] = {
            "raw_k": torch.zeros((n_attn, *raw), dtype=f32, device=dev),
            "raw_v": torch.zeros((n_attn, *raw), dtype=f32, device=dev),
            "comp_k": torch.zeros((n_comp, *comp), dtype=f32, device=dev),
            "comp_v": torch.zeros((n_comp, *comp), dtype=f32, device=dev),
            "idx_k": torch.zeros((n_comp, slots, c.head_dim), dtype=f32, device=dev),
        }
        self.kinds = tuple(kind for kind in KINDS if self.stacked[kind].shape[0] > 0)
        self.gen_table = torch.zeros(slots, dtype=torch.int32, device=self.device)
        comp_of = {layer: i for i, layer in enumerate(self.compressing)}
        self.layers: dict[int, LayerPools] = {
            layer: LayerPools(
                c.layer_kinds[layer],
                self.stacked["raw_k"][a],
                self.stacked["raw_v"][a],
                self.stacked["comp_k"][comp_of[layer]] if layer in comp_of else None,
                self.stacked["comp_v"][comp_of[layer]] if layer in comp_of else None,
                self.stacked["idx_k"][comp_of[layer]] if layer in comp_of else None,
            )
            for a, layer in enumerate(self.attention)
        }

    def flat(self, kind: str) -> Tensor:
        """The stacked pool of ``kind`` seen as ``[L * P, ...]`` (row ``l * P + s`` = page s of layer l)."""
        t = self.stacked[kind]
        return t.view(t.shape[0] * t.shape[1], *t.shape[2:])

    def rows(self, kind: str, slots: Sequence[int]) -> Tensor:
        """int64 row ids of the flattened ``kind`` pool for ``slots``, layer-major::

            slots [a, b], 2 layers  ->  [a, b, P + a, P + b]
        """
        n = self.stacked[kind].shape[0]
        base = torch.arange(n, dtype=torch.int64, device=self.device)[:, None] * self.slots
        return (base + torch.tensor(list(slots), dtype=torch.int64, device=self.device)[None, :]).reshape(-1)

    def page_elements(self, kind: str) -> int:
        """fp32 elements one page holds in ``kind``, over all layers that have it."""
        t = self.stacked[kind]
        return int(t.shape[0]) * int(t[0, 0].numel()) if t.shape[0] else 0

    @property
    def page_bytes(self) -> int:
        """Bytes of one page's payload (every kind, every attention layer)."""
        return 4 * sum(self.page_elements(kind) for kind in self.kinds)

    @property
    def token_bytes(self) -> int:
        """Bytes of one token's raw k/v over all attention layers (the copy-on-write unit)."""
        c = self.config
        return 4 * 2 * len(self.attention) * c.n_kv_heads * c.head_dim
