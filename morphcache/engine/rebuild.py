"""The linear layers' state at a hit boundary: which path rebuilds it, and running that path.

After ``attach`` a sequence holds the exact attention KV of its first P tokens (the hit).  A linear
layer's state cannot be sliced at P (docs/model-math.md, "Recovering recurrent state"), so before
the rest of the prompt runs, each linear layer's working state must be rebuilt at P::

    positions     0 ........... c ............ P-R ........... P-1 | P ...
    restore       P is a page end with a usable checkpoint: load it,  exact
                  run nothing
    recompute     state at the nearest earlier checkpoint c,          exact
                  run c .. P-1  (no usable one: c = 0, the zero state)
    tail-replay   zero state at P-R, run P-R .. P-1,                  approximate; opt-in per request
                  R = min(P, B): the request's budget B =             (fraction in [0, 1]); the runtime
                  round(fraction x (prompt - 1)), fixed when it       decides and counts it (spec
                  opts in, before its lookup (the most P can be)      replay_tail: replayed[r])
    trusted       run nothing: the working slot's contents are        the unsafe mode: stale or
                  taken as the state at P                             missing state reused as exact

A run (``forward.replay_chunk``) costs linear-layer work only: the positions go through layers
0 .. (last linear layer); attention layers read the cached KV and write nothing.

Two seams, each one small place:

- ``CheckpointSource``: where "the nearest earlier checkpoint" is found, where a tail replay starts,
  and where the states a writing pass reaches at page ends are saved.  ``NoCheckpoints`` (a runtime
  spec without recurrent state) answers the zero state at 0, decides a replay itself and saves
  nothing; ``RuntimeCheckpoints`` (``checkpoints.py``) asks the runtime (spec ``restore`` /
  ``recompute_state`` / ``replay_tail``, ``save``).
- ``choose_path``: which path a request takes.  A tail-replay request whose exact recompute would
  cost no more than its budget is served exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from morphcache.engine.forward import replay_chunk
from morphcache.engine.mixers import RecurrentSlot

if TYPE_CHECKING:
    from morphcache.engine.lease import FixedLease, SequenceLease
    from morphcache.engine.session import Session


class StateStart(Protocol):
    """The state a rebuild starts from, at ``position``."""

    @property
    def position(self) -> int:
        """The position the state is the state at (tokens before it)."""
        ...

    def load(self, slot: RecurrentSlot) -> None:
        """Put the starting state into the working slot (or arrange for the next pass to)."""


@dataclass(frozen=True)
class ZeroState:
    """The zero state at ``position``: exact at position 0, approximate anywhere else."""

    position: int

    def load(self, slot: RecurrentSlot) -> None:
        """The next pass starts every linear layer from zero (the kernels' ``reset``)."""
        slot.reset = True


class CheckpointSource(Protocol):
    """Finds the nearest earlier checkpoint of a sequence's linear-layer state, and saves new ones."""

    def nearest(self, session: Session, position: int) -> StateStart:
        """The readable checkpoint at the largest position <= ``position`` (the zero state at 0 if none)."""
        ...

    def tail(self, session: Session, hit: int, budget: int) -> StateStart | None:
        """The approximate start of a tail replay at ``hit`` for a request with ``budget`` tokens (None:
        the exact path costs no more, take it)."""
        ...

    def pieces(self, start: int, n: int) -> list[int]:
        """The lengths a writing pass of ``n`` tokens from ``start`` is cut into (a piece per state to
        save)."""
        ...

    def reached(self, session: Session, recurrent: RecurrentSlot) -> None:
        """A writing pass of an exact request (``recurrent.save``) reached the session's frontier."""


class NoCheckpoints:
    """No checkpoint is readable: the nearest earlier one is always the zero state at position 0."""

    def nearest(self, session: Session, position: int) -> StateStart:
        return ZeroState(0)

    def tail(self, session: Session, hit: int, budget: int) -> StateStart | None:
        """No runtime state to ask: replay ``min(hit, budget)`` tokens, unless that is the whole hit."""
        return ZeroState(hit - budget) if budget < hit else None

    def pieces(self, start: int, n: int) -> list[int]:
        return [n]

    def reached(self, session: Session, recurrent: RecurrentSlot) -> None:
        return None


@dataclass(frozen=True)
class StatePlan:
    """How one request's linear-layer state is rebuilt at its hit boundary ``hit``.

    ``path``: "none" (nothing to rebuild: a miss, or no linear layers), "restore" (a checkpoint at
    the hit, nothing run), "recompute", "tail-replay" or "trusted"; ``exact``: the path yields the
    exact state (an approximate request is never counted as exact); ``start``: where the run starts
    (None: run nothing); ``budget``: the request's tail-replay budget, when it opted in.
    """

    path: str
    exact: bool
    hit: int
    start: StateStart | None
    budget: float | None = None

    @property
    def replayed(self) -> int:
        """Tokens run through the linear layers to rebuild the state."""
        return self.hit - self.start.position if self.start is not None else 0

    @property
    def from_checkpoint(self) -> int:
        """Tokens of the hit not run because an exact path starts from a checkpoint (its position)."""
        return self.start.position if self.exact and self.path in ("restore", "recompute") and self.start else 0


class StatePath(Protocol):
    """A way to rebuild the state at a hit boundary."""

    def plan(self, session: Session, hit: int) -> StatePlan:
        """The plan for a sequence that holds the exact attention KV of its first ``hit`` tokens."""
        ...


@dataclass(frozen=True)
class ExactRecompute:
    """From the nearest earlier checkpoint, recompute the linear layers up to the hit (exact)."""

    checkpoints: CheckpointSource

    def plan(self, session: Session, hit: int) -> StatePlan:
        start = self.checkpoints.nearest(session, hit)
        return StatePlan("restore" if start.position == hit else "recompute", True, hit, start)


def replay_budget(fraction: float, prompt_tokens: int) -> int:
    """The tokens a tail-replay request may replay, fixed when it opts in (before its lookup):
    ``round(fraction x (prompt_tokens - 1))``, a fraction of the longest hit it can get."""
    return round(fraction * max(prompt_tokens - 1, 0))


@dataclass(frozen=True)
class TailReplay:
    """Replay only the last ``min(hit, B)`` tokens from a zero state (approximate), B the request's
    budget in tokens (``replay_budget``), unless the exact recompute costs no more than that; the
    checkpoint source (the runtime, with recurrent state) decides and names the start."""

    budget: float
    checkpoints: CheckpointSource

    def __post_init__(self) -> None:
        if not (math.isfinite(self.budget) and 0.0 <= self.budget <= 1.0):
            raise ValueError(f"a tail-replay budget is a fraction of the prefix in [0, 1], got {self.budget}")

    def tokens(self, prompt_tokens: int) -> int:
        """The request's budget in tokens (what it opts in with)."""
        return replay_budget(self.budget, prompt_tokens)

    def plan(self, session: Session, hit: int) -> StatePlan:
        start = self.checkpoints.tail(session, hit, self.tokens(session.prompt_tokens))
        if start is None:
            exact = ExactRecompute(self.checkpoints).plan(session, hit)
            return StatePlan(exact.path, True, hit, exact.start, self.budget)
        return StatePlan("tail-replay", False, hit, start, self.budget)


class TrustSlot:
    """The unsafe mode: whatever the working slot holds (another sequence's state, or zeros) is taken
    as the state at the hit boundary, as a cache that keeps no recurrent state would."""

    def plan(self, session: Session, hit: int) -> StatePlan:
        return StatePlan("trusted", True, hit, None)


def choose_path(*, unsafe: bool, tail_replay: float | None, checkpoints: CheckpointSource) -> StatePath:
    """The one place that decides how a request's linear-layer state is rebuilt."""
    if unsafe:
        return TrustSlot()
    if tail_replay is not None:
        return TailReplay(tail_replay, checkpoints)
    return ExactRecompute(checkpoints)


def plan_state(path: StatePath, session: Session, hit: int, linear_layers: int) -> StatePlan:
    """The path's plan, except that a miss (hit 0) or a model without linear layers has nothing to
    rebuild: every state starts from zero with the prefill."""
    if hit == 0 or not linear_layers:
        return StatePlan("none", True, hit, ZeroState(hit))
    return path.plan(session, hit)


def run_plan(session: Session, plan: StatePlan, recurrent: RecurrentSlot,
             lease: SequenceLease | FixedLease) -> int:
    """Carry out ``plan`` on the sequence's working slot; returns the token-layers run.

    State: the working state slot (and ``recurrent.reset``); checkpoints are saved by the later
    writing passes only if the plan is exact (``recurrent.save``).
    """
    recurrent.save = plan.exact
    if plan.start is None:
        recurrent.reset = False
        return 0
    plan.start.load(recurrent)
    engine = session.engine
    tokens = session.tokens[plan.start.position:plan.hit]
    return replay_chunk(engine.model, engine.store, engine.ops, lease, lease.slots, plan.start.position, tokens,
                        recurrent)
