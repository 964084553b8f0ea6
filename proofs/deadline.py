"""One overall deadline for a check: term building and every Z3 query share it.

Z3's per-query timeout bounds a single ``check()``; building the terms (which grows with the
instance: events x pages x slots) happens outside it.  A :class:`Deadline` is consulted in both
places::

    start                                                              start + seconds
      |-- build terms --|-- query --|-- build --|-- query ---------------|
           tick() ...      timeout = min(per-query, time left)           tick() raises DeadlineExpired

:class:`DeadlineExpired` is an :class:`~morphcache.proofs.induction.Unknown`, so whatever was not
settled in time is reported UNKNOWN (exit 2), never PROVED.  With a ``progress`` callback a tick
also reports, every ``heartbeat_s`` seconds, how long the check has run and how long it has left.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import z3

from .induction import Unknown


class DeadlineExpired(Unknown):
    """The overall deadline passed; the obligation in progress (and any after it) is UNKNOWN."""


class Deadline:
    """A budget of ``seconds`` (None: unbounded) starting now, for term building and solving."""

    def __init__(self, seconds: float | None, progress: Callable[[str], None] | None = None,
                 heartbeat_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.progress = progress
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self.start = clock()
        self.last_beat = self.start

    def elapsed(self) -> float:
        """Seconds since the deadline was set."""
        return self.clock() - self.start

    def remaining(self) -> float:
        """Seconds left (``inf`` when unbounded, never below 0)."""
        if self.seconds is None:
            return math.inf
        return max(0.0, self.seconds - self.elapsed())

    def tick(self, doing: str = "building terms") -> None:
        """Raise :class:`DeadlineExpired` if no time is left; otherwise maybe report progress."""
        now = self.clock()
        if self.seconds is not None and now - self.start >= self.seconds:
            raise DeadlineExpired(f"the overall deadline of {self.seconds:g} s passed while {doing} "
                                  f"(raise it with --deadline SECONDS)")
        if self.progress is not None and now - self.last_beat >= self.heartbeat_s:
            self.last_beat = now
            left = "" if self.seconds is None else f", {self.remaining():.0f} s left"
            self.progress(f"still {doing}: {now - self.start:.0f} s elapsed{left}")

    def timeout_ms(self, per_query_ms: int) -> int:
        """The Z3 timeout of the next query: the per-query timeout, cut to the time left (>= 1 ms)."""
        left = self.remaining()
        return per_query_ms if math.isinf(left) else max(1, min(per_query_ms, int(left * 1000)))


class BoundedSolver(z3.Solver):
    """A Z3 solver whose every ``check()`` is bounded by the per-query timeout and the deadline."""

    def __init__(self, per_query_ms: int, deadline: Deadline) -> None:
        super().__init__()
        self.per_query_ms = per_query_ms
        self.deadline = deadline

    def check(self, *assumptions: Any) -> Any:
        """``z3.Solver.check`` under the deadline; :class:`DeadlineExpired` if it ran out."""
        self.deadline.tick("solving")
        self.set("timeout", self.deadline.timeout_ms(self.per_query_ms))
        answer = super().check(*assumptions)
        if answer == z3.unknown and self.deadline.remaining() <= 0:
            self.deadline.tick("solving")
        return answer
