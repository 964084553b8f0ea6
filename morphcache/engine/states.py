"""The recurrent-state pools of the data plane: every linear layer's working states and checkpoint area.

A linear (gated-delta-rule) layer keeps no per-token KV: its history is one state [H, D, D] per
sequence. One stacked tensor per engine holds them, one contiguous view per linear layer (what
``gdn_prefill`` / ``gdn_decode`` / ``gdn_restore`` take as ``states``)::

    stacked   [L_lin, S + P, H, D, D]          L_lin linear layers, S working slots, P GPU page slots
    layer l   rows 0 .. S-1                    working states: one per live sequence, claimed when its
                                               session opens, given back when it closes
              row  S + s                       checkpoint area: the state after the page that sits in
                                               GPU page slot s (a page boundary), saved by the forward
                                               that completes the page

    e.g. S = 2, P = 4:   | w0 | w1 | ck(slot 0) | ck(slot 1) | ck(slot 2) | ck(slot 3) |

A working slot and a checkpoint row are both "state slots" of the kernels, so the kernels' rule that
a checkpoint is never a working slot holds by construction.  Checkpoints are written but not read
yet: whether the state saved after a page is still the state of that page (the page may have moved
tier or slot since) is for the runtime to govern (``rebuild.py`` says where they plug in).
"""

from __future__ import annotations

import torch
from torch import Tensor

from morphcache.model import ModelConfig


class StateSlotsExhaustedError(RuntimeError):
    """Every working state slot is held by a live sequence."""


class StatePools:
    """Working states and the checkpoint area of every linear layer (see the module docstring).

    ``working``: working slots (live sequences at once); ``page_slots``: GPU page slots, one
    checkpoint row each.  A model without linear layers gets an empty pool (slots are still handed out,
    so the engine does not need to tell the two apart).
    """

    def __init__(self, config: ModelConfig, working: int, page_slots: int, device: torch.device | str = "cpu") -> None:
        if working < 1:
            raise ValueError(f"need at least one working state slot, got {working}")
        c = config
        self.config = config
        self.working = working
        self.page_slots = page_slots
        self.device = torch.device(device)
        self.linear = c.linear_layers
        shape = (len(self.linear), working + page_slots, c.n_kv_heads, c.head_dim, c.head_dim)
        self.stacked = torch.zeros(shape, dtype=torch.float32, device=self.device)
        self.layers: dict[int, Tensor] = {layer: self.stacked[j] for j, layer in enumerate(self.linear)}
        self._free = list(range(working))
        self.owner: dict[int, str] = {}

    def claim(self, owner: str) -> int:
        """Hand a free working slot (the lowest) to ``owner``; its contents are left as they are (the
        caller starts it from zero, from a checkpoint, or, in the unsafe mode, trusts it)."""
        if not self._free:
            raise StateSlotsExhaustedError(
                f"all {self.working} working state slots are held (by {', '.join(sorted(self.owner.values()))})")
        slot = self._free.pop(0)
        self.owner[slot] = owner
        return slot

    def give_back(self, slot: int) -> None:
        """The slot's sequence closed; the slot can be claimed again (its state stays until then)."""
        if self.owner.pop(slot, None) is not None:
            self._free.append(slot)
            self._free.sort()

    def checkpoint_row(self, page_slot: int) -> int:
        """The state row of the checkpoint after the page in GPU page slot ``page_slot``."""
        if not 0 <= page_slot < self.page_slots:
            raise ValueError(f"page slot {page_slot} outside 0..{self.page_slots - 1}")
        return self.working + page_slot

    def state(self, layer: int, row: int) -> Tensor:
        """The state [H, D, D] of model layer ``layer`` (a linear layer) in state row ``row`` (a view)."""
        return self.layers[layer][row]

    @property
    def state_bytes(self) -> int:
        """Bytes of one sequence's recurrent state over all linear layers."""
        c = self.config
        return 4 * len(self.linear) * c.n_kv_heads * c.head_dim * c.head_dim

    @property
    def nbytes(self) -> int:
        """Bytes of the whole pool (working slots and checkpoint area)."""
        return self.stacked.numel() * self.stacked.element_size()
