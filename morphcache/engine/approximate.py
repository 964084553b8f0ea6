"""Approximate requests: keeping what they computed out of the cache, and measuring how far they are
from the golden forward.

A request served on an approximate linear-layer state (Tail-Replay) computes approximate hidden
states from its hit boundary on, so every KV entry it writes there is approximate too, and so are
the checkpoints it would save.  None of it may be read later as exact::

    blocks        0 ....... b-1 | b (partial copy) | b+1 ........ | last (filling)
    hit           shared, exact |<-------- written by this request: approximate -------->|
    at close      untouched     | withdrawn: evicted from the reuse pool if admitted, dropped
                                  (the filling page is forgotten by ``free``)

(``b = hit // C``.)  The runtime has no notion of an approximate page yet, so the engine withdraws
them itself through spec events (``evict``, ``drop``) before it frees the sequence; a refusal is
an error, never a silent admission.  Checkpoints are not saved by such a request at all
(``RecurrentSlot.save``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from morphcache.runtime import CacheManager, GuardRefused, MorphcacheError


class WithdrawError(RuntimeError):
    """A page computed on an approximate state could not be taken out of the cache."""


def withdraw(manager: CacheManager, pages: Sequence[int], first_block: int) -> int:
    """Take the sequence's pages at blocks >= ``first_block`` out of the reuse pool and drop them;
    returns how many were dropped (a page still filling is left to ``free``).

    State: spec ``evict`` (if pooled) and ``drop`` on each such page.  Call with no lease held on
    them; raises WithdrawError if the spec refuses.
    """
    dropped = 0
    for pid in pages[first_block:]:
        st = manager.page_state(pid)
        if st["tail"] not in ("sealed", "released") or st["tier"] == "dropped":
            continue
        try:
            if st["pool"] == "pooled":
                manager.evict(pid)
            manager.drop(pid)
        except (GuardRefused, MorphcacheError) as exc:
            raise WithdrawError(f"page {pid} (block {st['depth']}) holds approximate KV and could not be "
                                f"withdrawn from the cache: {exc}") from exc
        dropped += 1
    return dropped


@dataclass(frozen=True)
class Divergence:
    """How far a request's logits are from the golden forward's over the same positions."""

    max_abs_diff: float
    top1_agreement: float
    positions: int


def divergence(logits: Tensor, golden: Tensor) -> Divergence:
    """Largest |logit - golden| and the share of positions whose argmax agrees (1.0 over no position)."""
    n = int(logits.shape[0])
    if n == 0:
        return Divergence(0.0, 1.0, 0)
    cached = logits.to(golden.device)
    diff = float((cached - golden).abs().max())
    agree = float((torch.argmax(cached, dim=-1) == torch.argmax(golden, dim=-1)).float().mean())
    return Divergence(diff, agree, n)
