"""Counters of a CacheManager and the frozen snapshot it exports.

Hit rates are token-weighted over lookups::

    nominal_hit_rate   = sum(nominal hit tokens)   / sum(requested tokens)
    effective_hit_rate = sum(effective hit tokens) / sum(requested tokens)
    gap                = nominal - effective, attributed to every object that blocked the nominal
                         position (one lookup can charge several objects)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from .statepath import StateMetricsSnapshot


@dataclass(frozen=True)
class MetricsSnapshot:
    """A consistent copy of the counters."""

    lookups: int
    requested_tokens: int
    nominal_tokens: int
    effective_tokens: int
    misses: int
    ready: int
    needs_recovery: int
    gap_tokens_by_object: Mapping[str, int]
    gap_lookups_by_object: Mapping[str, int]
    planned_by_path: Mapping[str, int]
    recoveries_by_path: Mapping[str, int]
    bytes_moved: Mapping[str, int]
    corrupt_pages: Mapping[str, int]
    events_fired: Mapping[str, int]
    events_refused: Mapping[str, int]
    extra: Mapping[str, int] = field(default_factory=dict)
    policy_refusals: int = 0
    """Victims the eviction policy proposed that the spec's guard or the runtime refused."""
    state: StateMetricsSnapshot | None = None
    """Recurrent-state rebuilds, exact and approximate apart (None for a spec without recurrent state)."""
    policy_victims: Mapping[str, int] = field(default_factory=dict)
    """Victims of the eviction policy accepted, by decision (``"gpu"``, ``"host"``, ``"disk"``, ``"pool"``)."""

    @property
    def nominal_hit_rate(self) -> float:
        """Nominal hit tokens over requested tokens."""
        return self.nominal_tokens / self.requested_tokens if self.requested_tokens else 0.0

    @property
    def effective_hit_rate(self) -> float:
        """Effective hit tokens over requested tokens."""
        return self.effective_tokens / self.requested_tokens if self.requested_tokens else 0.0

    @property
    def gap_tokens(self) -> int:
        """Nominal minus effective hit tokens: the exposure surface of hash-only reuse."""
        return self.nominal_tokens - self.effective_tokens


class Metrics:
    """Mutable counters, updated under the manager's lock."""

    def __init__(self) -> None:
        self.lookups = 0
        self.requested_tokens = 0
        self.nominal_tokens = 0
        self.effective_tokens = 0
        self.misses = 0
        self.ready = 0
        self.needs_recovery = 0
        self.gap_tokens_by_object: Counter[str] = Counter()
        self.gap_lookups_by_object: Counter[str] = Counter()
        self.planned_by_path: Counter[str] = Counter()
        self.recoveries_by_path: Counter[str] = Counter()
        self.bytes_moved: Counter[str] = Counter()
        self.corrupt_pages: Counter[str] = Counter()
        self.extra: Counter[str] = Counter()

    def lookup(self, requested: int, nominal: int, effective: int, blocking: set[str]) -> None:
        """Count one lookup and charge its gap to the objects that blocked the nominal position."""
        self.lookups += 1
        self.requested_tokens += requested
        self.nominal_tokens += nominal
        self.effective_tokens += effective
        gap = nominal - effective
        if gap:
            for obj in blocking:
                self.gap_tokens_by_object[obj] += gap
                self.gap_lookups_by_object[obj] += 1

    def snapshot(self, fired: Mapping[str, int], refused: Mapping[str, int], policy_refusals: int = 0,
                 policy_victims: Mapping[str, int] | None = None) -> MetricsSnapshot:
        """A frozen copy (with the event counters of the firing pipeline and the policy's refusals and
        accepted victims)."""
        return MetricsSnapshot(
            self.lookups, self.requested_tokens, self.nominal_tokens, self.effective_tokens, self.misses,
            self.ready, self.needs_recovery, dict(self.gap_tokens_by_object),
            dict(self.gap_lookups_by_object), dict(self.planned_by_path), dict(self.recoveries_by_path),
            dict(self.bytes_moved), dict(self.corrupt_pages), dict(fired), dict(refused), dict(self.extra),
            policy_refusals, policy_victims=dict(policy_victims or {}),
        )
