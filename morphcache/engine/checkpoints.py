"""Recurrent-state checkpoints kept by the runtime (a spec with recurrent state, ``spec/gdn_hybrid.yaml``).

The runtime owns them as spec objects (``ckpt`` per page, ``rstate`` per reader): it says which one
is usable (saved at the page's current generation), and every save, restore and replay is a spec event::

    writing pass    cut at page ends:  | .. C-1 | C .. 2C-1 | 2C .. n |
    after a piece   ending at a page end, of an exact request: save_state(seq, copy of the working
                    state) (spec ``save``; the guard refuses a state that is not exact)
    at a hit P      nearest(P) = the runtime's exact path (state_path): restore at P, or recompute
                    from the checkpoint at c <= P, or from the zero state at 0; loading it fires
                    ``restore`` / ``recompute_state`` (rebuild_state) and copies the payload into the
                    sequence's working state slot
    tail replay     a request that opted in (``register(approximate=True, replay_budget=B)``, spec
                    ``opt_in`` with n = B): tail(P) asks state_path(exact=False); when the runtime
                    names ``replay_tail`` (the exact path costs more than B), loading it fires
                    ``replay_tail`` (rebuild_state) and the forward replays the spec's replayed[r]
                    tokens from the zero state; its reader's state is never made exact, so nothing
                    it computes is saved
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from morphcache.engine.mixers import RecurrentSlot
from morphcache.engine.states import StatePools
from morphcache.runtime import CacheManager

if TYPE_CHECKING:
    from morphcache.engine.session import Session


class StartMovedError(RuntimeError):
    """The runtime's exact path changed between the plan and its run (the engine serves one request at
    a time, so this is a bug, not a race)."""


@dataclass(frozen=True)
class RuntimeStart:
    """The exact start the runtime named for ``seq_id`` at ``position`` (a checkpoint's page end, or 0)."""

    manager: CacheManager
    states: StatePools
    seq_id: str
    position: int

    def load(self, slot: RecurrentSlot) -> None:
        """Fire the runtime's exact rebuild (``restore`` or ``recompute_state``) and put its checkpoint
        into the working slot (none: the next pass starts from zero)."""
        rebuilt = self.manager.rebuild_state(self.seq_id, exact=True)
        if rebuilt.path.start != self.position or not rebuilt.path.exact:
            raise StartMovedError(f"{self.seq_id}: planned start {self.position}, the runtime now says "
                                  f"{rebuilt.path.describe()}")
        if rebuilt.payload is None:
            slot.reset = True
            return
        self.states.stacked[:, slot.slot].copy_(rebuilt.payload)  # type: ignore[arg-type]
        slot.reset = False


@dataclass(frozen=True)
class RuntimeReplay:
    """The approximate start the runtime named for ``seq_id``: the zero state at ``position``."""

    manager: CacheManager
    seq_id: str
    position: int

    def load(self, slot: RecurrentSlot) -> None:
        """Fire the runtime's ``replay_tail`` (rebuild_state, exact=False); the next pass starts every
        linear layer from zero at the start the spec's ``replayed[r]`` gives."""
        rebuilt = self.manager.rebuild_state(self.seq_id, exact=False)
        if rebuilt.path.kind != "replay_tail" or rebuilt.path.start != self.position:
            raise StartMovedError(f"{self.seq_id}: planned a tail replay from {self.position}, the runtime now "
                                  f"says {rebuilt.path.describe()}")
        slot.reset = True


class RuntimeCheckpoints:
    """A ``CheckpointSource`` over the runtime's recurrent-state objects (module docstring)."""

    def __init__(self, manager: CacheManager, states: StatePools, page_size: int) -> None:
        self.manager, self.states, self.C = manager, states, page_size

    def nearest(self, session: Session, position: int) -> RuntimeStart:
        path = self.manager.state_path(session.seq_id, exact=True)
        if path.position != position:
            raise StartMovedError(f"{session.seq_id}: the sequence is at {path.position}, not at the hit {position}")
        return RuntimeStart(self.manager, self.states, session.seq_id, path.start)

    def tail(self, session: Session, hit: int, budget: int) -> RuntimeReplay | None:
        """The runtime's answer for the reader (which opted in with ``budget`` at register): a tail
        replay's start, or None when its path is exact."""
        path = self.manager.state_path(session.seq_id, exact=False)
        if path.position != hit:
            raise StartMovedError(f"{session.seq_id}: the sequence is at {path.position}, not at the hit {hit}")
        if path.kind != "replay_tail":
            return None
        return RuntimeReplay(self.manager, session.seq_id, path.start)

    def pieces(self, start: int, n: int) -> list[int]:
        """Cut at every page end: ``start = 5, n = 30, C = 16`` gives ``[11, 16, 3]``."""
        out: list[int] = []
        pos, end = start, start + n
        while pos < end:
            step = min(end, (pos // self.C + 1) * self.C) - pos
            out.append(step)
            pos += step
        return out

    def reached(self, session: Session, recurrent: RecurrentSlot) -> None:
        frontier = self.manager.frontier(session.seq_id)
        if recurrent.save and frontier % self.C == 0:
            self.manager.save_state(session.seq_id, self.states.stacked[:, recurrent.slot].clone())
