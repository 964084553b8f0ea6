"""Recording of executed steps for the independent conformance checker.

A step is one event fired in one view, with the *whole* view before and after (system state as
``name``, per-page state as ``name[i]`` for block index ``i``, and ``pages``).  An event on a page
shared by several sequences is recorded once per sequence view; an event with a global meaning is
recorded in the global view.  The checker (``morphcache.proofs.conformance.check_step``) decides
from these dicts alone whether the spec's transition relation allows the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Step:
    """One recorded transition: ``event(args)`` took ``before`` to ``after`` in view ``view``."""

    event: str
    view: str
    args: dict[str, int]
    before: dict[str, Any]
    after: dict[str, Any]


@dataclass
class Recorder:
    """Collects steps while ``enabled``; keeps at most ``limit`` (oldest dropped first)."""

    enabled: bool = False
    limit: int = 1_000_000
    steps: list[Step] = field(default_factory=list)
    dropped: int = 0

    def add(self, step: Step) -> None:
        """Append one step (dropping the oldest beyond the limit)."""
        self.steps.append(step)
        if len(self.steps) > self.limit:
            del self.steps[0]
            self.dropped += 1

    def take(self) -> list[Step]:
        """Return the recorded steps and start a new recording."""
        out, self.steps = self.steps, []
        return out
