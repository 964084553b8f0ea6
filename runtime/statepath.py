"""The recurrent-state path of a hit: how a linear-attention reader's state is made at a position.

A linear layer's state summarises the whole prefix, so a hit at position ``pos`` needs the state at
``pos``.  Checkpoints are taken at page ends (spec object ``ckpt``, one per page id, with the
generation ``sgen`` it was taken at); one is usable when the spec's ``lookup.ready[ckpt]`` holds::

    tokens      0 ....... C-1 | C ...... 2C-1 | 2C ...... 3C-1 | 3C .. pos-1 | pos
    checkpoint            ck0 |           ck1 |            --- |
    restore     pos == 3C and ck2 usable: load ck2, run nothing                        exact
    recompute   nearest usable checkpoint at or before pos (ck1: start 2C), run
                start .. pos-1 (no usable one: start 0 from the zero state)             exact
    replay_tail the request opted in with budget B (spec ``budget[r]``, at most R)
                and B < the recompute's tokens: zero state at pos - B, run the last
                B tokens (the spec's ``replayed[r]``)                                    approximate

``StatePath`` is the answer a lookup carries (``Ready.state``, ``RecoveryPlan.state``) and the path
``rebuild_state`` takes; ``StateMetrics`` counts what rebuilds did, exact and approximate apart.
"""

from __future__ import annotations

from dataclasses import dataclass

RESTORE, RECOMPUTE, REPLAY_TAIL = "restore", "recompute", "replay_tail"


@dataclass(frozen=True)
class StatePath:
    """How the recurrent state at ``position`` is made.

    ``kind``: ``"restore"`` (load the checkpoint of block ``block``, page ``page``; nothing run),
    ``"recompute"`` (from the checkpoint of block ``block`` at ``start``, or from the zero state at 0
    when ``page`` is None; exact) or ``"replay_tail"`` (zero state at ``start = position - budget``;
    approximate unless ``start`` is 0).  ``exact`` is False only for a tail replay of a part of the
    prefix: such a state is never reported or counted as an exact hit.
    """

    kind: str
    exact: bool
    position: int
    start: int
    page: int | None = None
    block: int | None = None

    @property
    def tokens(self) -> int:
        """Tokens run through the linear layers to make the state (0 for a restore)."""
        return self.position - self.start

    def describe(self) -> str:
        """One line for reports: ``restore at page k``, ``recompute from checkpoint k (n tokens)``..."""
        if self.kind == RESTORE:
            return f"restore at block {self.block} (exact)"
        if self.kind == RECOMPUTE:
            where = f"checkpoint {self.block}" if self.block is not None else "the start"
            return f"recompute from {where} ({self.tokens} tokens, exact)"
        return f"tail replay of {self.tokens} tokens ({'exact: the whole prefix' if self.exact else 'approximate'})"


@dataclass(frozen=True)
class RebuiltState:
    """What ``rebuild_state`` did: the path taken (the spec event that fired decides ``exact``) and the
    checkpoint payload to load (None: start from the zero state)."""

    path: StatePath
    payload: object | None


@dataclass(frozen=True)
class StateMetricsSnapshot:
    """Rebuilds of recurrent states, exact and approximate apart.

    ``exact_tokens`` / ``approximate_tokens``: hit tokens whose state was made exact (restore,
    recompute_state) / approximate (replay_tail of part of the prefix); ``requested_tokens``: every
    lookup's requested tokens (the rates' denominator).  ``recomputed_tokens`` and
    ``replayed_tokens`` were run through the linear layers; ``checkpoint_tokens_saved`` are the hit
    tokens exact rebuilds did not run because they started from a checkpoint.  ``opt_ins``: requests
    that opted in to an approximate state (spec ``opt_in``, each with its replay budget).
    """

    requested_tokens: int
    exact_tokens: int
    approximate_tokens: int
    restores: int
    recomputes: int
    replays: int
    recomputed_tokens: int
    replayed_tokens: int
    checkpoint_tokens_saved: int
    saves: int
    checkpoints_dropped: int
    checkpoints_offloaded: int
    checkpoints_prefetched: int
    opt_ins: int = 0

    @property
    def exact_effective_hit_rate(self) -> float:
        """Hit tokens served with an exact recurrent state over requested tokens."""
        return self.exact_tokens / self.requested_tokens if self.requested_tokens else 0.0

    @property
    def approximate_effective_hit_rate(self) -> float:
        """Hit tokens served with an approximate recurrent state over requested tokens."""
        return self.approximate_tokens / self.requested_tokens if self.requested_tokens else 0.0


class StateMetrics:
    """Mutable counters of the recurrent part (updated under the manager's lock)."""

    def __init__(self) -> None:
        self.exact_tokens = self.approximate_tokens = 0
        self.restores = self.recomputes = self.replays = 0
        self.recomputed_tokens = self.replayed_tokens = self.checkpoint_tokens_saved = 0
        self.saves = self.dropped = self.offloaded = self.prefetched = 0
        self.opt_ins = 0

    def rebuilt(self, path: StatePath) -> None:
        """Count one rebuild along ``path`` (``path.exact`` as the fired event decided)."""
        if path.exact:
            self.exact_tokens += path.position
        else:
            self.approximate_tokens += path.position
        if path.kind == RESTORE:
            self.restores += 1
            self.checkpoint_tokens_saved += path.position
        elif path.kind == RECOMPUTE:
            self.recomputes += 1
            self.recomputed_tokens += path.tokens
            self.checkpoint_tokens_saved += path.start
        else:
            self.replays += 1
            self.replayed_tokens += path.tokens

    def snapshot(self, requested_tokens: int) -> StateMetricsSnapshot:
        """A frozen copy, with the lookups' requested tokens as the rates' denominator."""
        return StateMetricsSnapshot(
            requested_tokens, self.exact_tokens, self.approximate_tokens, self.restores, self.recomputes,
            self.replays, self.recomputed_tokens, self.replayed_tokens, self.checkpoint_tokens_saved, self.saves,
            self.dropped, self.offloaded, self.prefetched, self.opt_ins)
