"""What operations in progress hold: pages a copy in flight or a hold keeps from being forgotten (the
collector reads it; ``check_integrity`` too, so it is exact while copies are in flight)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from concurrent.futures import Future


class Busy:
    """Pages operations in progress use: copies in flight (with their futures) and holds."""

    def __init__(self) -> None:
        self.inflight: dict[int, Future[None]] = {}
        self.held: dict[int, int] = {}  # page -> holds (a plain dict: a hold and its end are the hot path)
        self.deferred: set[int] = set()  # held pages a ``collect`` found otherwise free

    def __call__(self, pid: int) -> bool:
        return pid in self.inflight or self.held.get(pid, 0) > 0

    def any_of(self, pids: Collection[int]) -> bool:
        """``self(pid)`` for one of ``pids`` (a held page's entry is dropped at zero holds)."""
        inflight, held = self.inflight, self.held  # (an empty dict tells at once: no pass over ``pids``)
        return (bool(inflight) and not inflight.keys().isdisjoint(pids)) or \
            (bool(held) and not held.keys().isdisjoint(pids))

    def hold(self, pids: Iterable[int]) -> None:
        """Keep ``pids`` from being forgotten until ``unhold``."""
        held, get = self.held, self.held.get
        for pid in pids:
            held[pid] = get(pid, 0) + 1

    def unhold(self, pids: Iterable[int]) -> list[int]:
        """Undo one ``hold`` of each of ``pids``; returns the deferred pages no longer held (the ones
        to collect now)."""
        held = self.held
        for pid in pids:
            left = held[pid] - 1
            if left > 0:
                held[pid] = left
            else:
                del held[pid]
        if not self.deferred:
            return []
        ready = [pid for pid in self.deferred if pid not in held]
        self.deferred.difference_update(ready)
        return ready
