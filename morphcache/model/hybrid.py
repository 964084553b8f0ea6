"""The hybrid-attention reference model: seeded weights plus its position-wise blocks.

The attention itself is computed elsewhere: golden.py (full recomputation, the baseline),
incremental.py (plain-torch chunked reference), and later the paged cache kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn

from morphcache.model.config import ModelConfig
from morphcache.model.layers import HybridLayer, rms_norm
from morphcache.model.weights import gaussian, linear_weight, norm_weight


class HybridModel(nn.Module):
    """A small hybrid-attention transformer with fp32 weights drawn from one seed.

    Weights come from a torch.Generator seeded with `seed`, in the order: embedding, each layer
    (see HybridLayer), final norm, lm head. Same config and seed -> bit-identical weights.
    """

    def __init__(self, config: ModelConfig | None = None, seed: int = 0) -> None:
        super().__init__()
        self.config = config if config is not None else ModelConfig()
        self.seed = seed
        c = self.config
        gen = torch.Generator().manual_seed(seed)
        self.embedding = gaussian(gen, c.vocab_size, c.d_model)
        self._layers = nn.ModuleList([HybridLayer(c, kind, gen) for kind in c.layer_kinds])
        self.final_norm_weight = norm_weight(gen, c.d_model)
        self.lm_head = linear_weight(gen, c.d_model, c.vocab_size)

    @property
    def layers(self) -> tuple[HybridLayer, ...]:
        """The layers in order; layers[i].kind == config.layer_kinds[i]."""
        return tuple(cast(HybridLayer, m) for m in self._layers)

    @property
    def device(self) -> torch.device:
        return self.embedding.device

    def token_tensor(self, tokens: Sequence[int] | Tensor) -> Tensor:
        """Validate tokens (1-D, ids in 0..vocab-1) and return them as a long tensor on the model's device."""
        t = torch.as_tensor(tokens, dtype=torch.long, device=self.device)
        if t.dim() != 1:
            raise ValueError(f"tokens must be 1-D, got shape {tuple(t.shape)}")
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.config.vocab_size):
            raise ValueError(f"token ids must be in 0..{self.config.vocab_size - 1}")
        return t

    def embed(self, tokens: Sequence[int] | Tensor) -> Tensor:
        """Embedding rows [T, d_model] of token ids [T]."""
        return self.embedding[self.token_tensor(tokens)]

    def head(self, x: Tensor) -> Tensor:
        """Final RMSNorm + lm head: residual stream [T, d_model] -> logits [T, vocab]."""
        return rms_norm(x, self.final_norm_weight, self.config.norm_eps) @ self.lm_head

    def golden_logits(self, tokens: Sequence[int] | Tensor) -> Tensor:
        """Logits [T, vocab] by full recomputation over the whole sequence (see golden.py)."""
        from morphcache.model.golden import golden_logits

        return golden_logits(self, tokens)
