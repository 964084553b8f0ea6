"""morphcache.runtime: the guarded prefix cache an engine embeds, compiled from a spec.

Entry point: :class:`CacheManager` (see ``runtime/README.md``).
"""

from .binding import SHIPPED_SPEC
from .ckptstore import CheckpointStore, MemoryCheckpointStore
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
)
from .lease import Lease, PartialSnapshot, ReadView
from .manager import CacheManager
from .metrics import MetricsSnapshot
from .plan import Assignment, LookupResult, Miss, NeedsRecovery, Probe, Ready, RecoveryPlan, RecoveryReport
from .policy import EvictionPolicy, LRUPolicy, PageMeta, make_policy, policy_names, register_policy
from .recorder import Step
from .recurrent import GDN_SPEC
from .statepath import RebuiltState, StateMetricsSnapshot, StatePath
from .store import MemoryPageStore, PageStore, expected_payload

__all__ = [
    "GDN_SPEC",
    "SHIPPED_SPEC",
    "Assignment",
    "BadInputError",
    "CacheManager",
    "CapacityError",
    "CheckpointStore",
    "ConfigError",
    "DiversionError",
    "DomainError",
    "DuplicateSequenceError",
    "EvictionPolicy",
    "ForeignLeaseError",
    "GuardRefused",
    "IntegrityError",
    "LRUPolicy",
    "Lease",
    "LeaseError",
    "LeaseReleasedError",
    "LookupResult",
    "MemoryCheckpointStore",
    "MemoryPageStore",
    "MetricsSnapshot",
    "Miss",
    "MorphcacheError",
    "NeedsRecovery",
    "PageMeta",
    "PageStore",
    "PartialSnapshot",
    "PinnedPageError",
    "Probe",
    "ReadView",
    "Ready",
    "RebuiltState",
    "RecoveryPlan",
    "RecoveryReport",
    "RuntimeConfig",
    "StaleLeaseError",
    "StateMetricsSnapshot",
    "StatePath",
    "Step",
    "TierError",
    "TopologyError",
    "UnknownPageError",
    "UnknownSequenceError",
    "expected_payload",
    "make_policy",
    "policy_names",
    "register_policy",
]
