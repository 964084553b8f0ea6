"""Sparse routing: which earlier pages a sparse-layer query attends (docs/model-math.md).

    qi[d]    = mean_h q[h, d]                  indexer query
    score[b] = qi . ik[b]                      for pages b < page_of(t)
    selected = top-k scores, descending, ties -> lower page index first, padded with -1
"""

from __future__ import annotations

import torch
from torch import Tensor


def indexer_query(q: Tensor) -> Tensor:
    """Indexer queries qi [T, D] from queries q [T, Hq, D] (mean over query heads)."""
    return q.mean(dim=1)


def page_scores(qi: Tensor, ik: Tensor) -> Tensor:
    """Scores [n_pages] of one query's indexer query qi [D] against indexer keys ik [n_pages, D]."""
    return ik @ qi


def select_pages(scores: Tensor, top_k: int) -> Tensor:
    """Top-k page indices for one query, as a long tensor of exactly top_k entries.

    scores: [n_pages], the scores of the candidate pages 0..n_pages-1. The result lists the
    selected pages in descending score order (equal scores: lower page index first), padded with
    -1 when n_pages < top_k.
    """
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D, got shape {tuple(scores.shape)}")
    order = torch.sort(scores, descending=True, stable=True).indices[:top_k]
    out = torch.full((top_k,), -1, dtype=torch.long, device=scores.device)
    out[: order.numel()] = order
    return out
