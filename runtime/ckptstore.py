"""Where recurrent-state checkpoint payloads live: one per page id, on the GPU or the host.

The recurrent part (``recurrent.py``) fires the spec events; a ``CheckpointStore`` only keeps the
bytes where the events say they are (``check_integrity`` compares the two).  ``MemoryCheckpointStore``
keeps the payloads as handed over (the caller hands a copy) and records the tier each is on; a data
plane with real tiers moves them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class CheckpointStore(Protocol):
    """Where checkpoint payloads live: one per page id, on the GPU or the host."""

    def put(self, pid: int, payload: object) -> None:
        """Store the payload of page ``pid``'s checkpoint on the GPU (replacing any)."""

    def get(self, pid: int) -> object:
        """The payload of page ``pid``'s checkpoint."""

    def move(self, pid: int, tier: str) -> None:
        """Move the payload to ``tier`` ("gpu" or "host")."""

    def discard(self, pid: int) -> None:
        """Forget the payload."""

    def homes(self) -> Mapping[int, str]:
        """Page id -> tier of every stored payload."""


class MemoryCheckpointStore:
    """Payloads kept as handed over (the caller hands a copy), with the tier each is said to be on."""

    def __init__(self) -> None:
        self.payloads: dict[int, object] = {}
        self.home: dict[int, str] = {}

    def put(self, pid: int, payload: object) -> None:
        self.payloads[pid] = payload
        self.home[pid] = "gpu"

    def get(self, pid: int) -> object:
        return self.payloads[pid]

    def move(self, pid: int, tier: str) -> None:
        self.home[pid] = tier

    def discard(self, pid: int) -> None:
        self.payloads.pop(pid, None)
        self.home.pop(pid, None)

    def homes(self) -> Mapping[int, str]:
        return self.home
