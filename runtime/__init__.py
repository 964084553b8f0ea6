"""morphcache.runtime: the guarded prefix cache an engine embeds, compiled from a spec.

Entry point: :class:`CacheManager` (see ``runtime/README.md``).
"""

from .config import RuntimeConfig
from .errors import (
    BadInputError,
    CapacityError,
    ConfigError,
    DiversionError,
    DomainError,
    DuplicateSequenceError,
    ForeignLeaseError,
    GuardRefused,
    IntegrityError,
    LeaseError,
    LeaseReleasedError,
    MorphcacheError,
    PinnedPageError,
    StaleLeaseError,
    TierError,
    TopologyError,
    UnknownPageError,
    UnknownSequenceError,
    ViewConflictError,
)
from .lease import Lease, PartialSnapshot
from .lookups import ReadView
from .manager import CacheManager
from .metrics import MetricsSnapshot
from .plan import Assignment, LookupResult, Miss, NeedsRecovery, Probe, Ready, RecoveryPlan, RecoveryReport
from .recorder import Step
from .store import MemoryPageStore, PageStore, expected_payload

__all__ = [
    "Assignment",
    "BadInputError",
    "CacheManager",
    "CapacityError",
    "ConfigError",
    "DiversionError",
    "DomainError",
    "DuplicateSequenceError",
    "ForeignLeaseError",
    "GuardRefused",
    "IntegrityError",
    "Lease",
    "LeaseError",
    "LeaseReleasedError",
    "LookupResult",
    "MemoryPageStore",
    "MetricsSnapshot",
    "Miss",
    "MorphcacheError",
    "NeedsRecovery",
    "PageStore",
    "PartialSnapshot",
    "PinnedPageError",
    "Probe",
    "ReadView",
    "Ready",
    "RecoveryPlan",
    "RecoveryReport",
    "RuntimeConfig",
    "StaleLeaseError",
    "Step",
    "TierError",
    "TopologyError",
    "UnknownPageError",
    "UnknownSequenceError",
    "ViewConflictError",
    "expected_payload",
]
