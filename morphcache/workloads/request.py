"""One serving request of a workload."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    """A prompt to prefill and a number of tokens to decode, arriving at `arrival_ms`.

    tokens: the prompt, byte token ids 0..255. output_len: tokens the request decodes.
    spans: ``(start, end, type_name)`` token-type spans over the prompt (empty: untyped);
    session / task: the conversation and the kind of work it belongs to (None: unknown).  An engine
    passes all three to the runtime, whose pages carry them for the eviction policy.
    """

    request_id: str
    arrival_ms: float
    tokens: tuple[int, ...]
    output_len: int
    spans: tuple[tuple[int, int, str], ...] = ()
    session: str | None = None
    task: str | None = None

    def __post_init__(self) -> None:
        if self.arrival_ms < 0:
            raise ValueError(f"{self.request_id}: arrival_ms must be >= 0, got {self.arrival_ms}")
        if self.output_len < 0:
            raise ValueError(f"{self.request_id}: output_len must be >= 0, got {self.output_len}")

    @property
    def prompt_len(self) -> int:
        return len(self.tokens)


def shared_prefix_len(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
