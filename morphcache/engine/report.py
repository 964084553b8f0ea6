"""What serving one request did (frozen values handed back with its logits)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from torch import Tensor


@dataclass(frozen=True)
class RequestReport:
    """Counters of one served request.

    ::

        prompt   0 ........ reused ........ nominal ............ prompt_tokens (+ decoded)
                 [ read from the cache ][ computed by the forward: `computed` tokens     ]
                                         [ recomputed ]   (in the nominal hit, not reusable)

    ``effective``: the readable hit at lookup time, before recovery; ``gap_by_object``: nominal -
    effective tokens charged to each object that blocked the nominal position; ``recoveries``:
    (page, object) assignments executed, by path; ``rebuilt_pages``: cached pages on the recompute
    path rebuilt from this request's prefill; ``max_abs_diff``: largest |cached - golden| logit
    difference and ``top1_agreement`` the share of positions whose argmax agrees with golden, when the
    request was checked.

    Linear layers (engine/rebuild.py): ``state_path`` ("none", "restore", "recompute", "tail-replay",
    "trusted"); ``checkpoint_tokens``: tokens of the hit an exact rebuild did not run because it
    started from a runtime checkpoint; ``exact`` False for a request served on an approximate state (it is never counted
    as exact); ``linear_tokens``: tokens run through the linear layers to rebuild the state at the
    hit boundary (``linear_token_layers``: the same in token-layers); ``replay_budget``: the
    request's tail-replay budget if it opted in; ``withdrawn_pages``: pages an approximate request
    wrote and took out of the cache.
    """

    request_id: str
    prompt_tokens: int
    decoded: int
    nominal: int
    effective: int
    reused: int
    computed: int
    gap_by_object: Mapping[str, int] = field(default_factory=dict)
    recoveries: Mapping[str, int] = field(default_factory=dict)
    prefetched_bytes: int = 0
    prefetched_pages: int = 0
    corrupt_pages: int = 0
    rebuilt_pages: int = 0
    wall_s: float = 0.0
    max_abs_diff: float | None = None
    top1_agreement: float | None = None
    state_path: str = "none"
    exact: bool = True
    linear_tokens: int = 0
    linear_token_layers: int = 0
    replay_budget: float | None = None
    withdrawn_pages: int = 0
    checkpoint_tokens: int = 0

    @property
    def recomputed(self) -> int:
        """Tokens of the nominal hit that had to be computed again."""
        return max(0, self.nominal - self.reused)


@dataclass(frozen=True)
class ServeResult:
    """A served request: all its tokens (prompt then decoded), the logits of positions
    ``start .. len(tokens) - 1`` (row i = position start + i), its report, and the page ids its
    sequence held when it closed (block order; ids are reused once a page is forgotten)."""

    tokens: tuple[int, ...]
    start: int
    logits: Tensor
    report: RequestReport
    pages: tuple[int, ...] = ()
