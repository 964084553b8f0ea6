"""morphcache.engine: the reference model served end to end through the runtime and the kernels.

- Engine / EngineConfig: serve requests (lookup, recovery, lease, cached prefill and decode).
- TensorPageStore / PagePools: the runtime's data plane over paged tensor pools.
- forward_chunk: the layer-by-layer cached forward through the kernels.
- resolve_hit: a lookup answer turned into a lease by executing the recovery plan.
"""

from morphcache.engine.config import EngineConfig
from morphcache.engine.engine import Engine
from morphcache.engine.forward import forward_chunk
from morphcache.engine.hashonly import HashOnlyHit, HashOnlyIndex
from morphcache.engine.lease import FixedLease, SequenceLease
from morphcache.engine.ops import AttentionOps, ReferenceOps, TritonOps, UnguardedOps, make_ops
from morphcache.engine.pools import LayerPools, PagePools
from morphcache.engine.recovery import HitOutcome, resolve_hit
from morphcache.engine.report import RequestReport, ServeResult
from morphcache.engine.session import EngineCapacityError, Session, SessionFailedError
from morphcache.engine.store import TensorPageStore

__all__ = [
    "AttentionOps",
    "Engine",
    "EngineCapacityError",
    "EngineConfig",
    "FixedLease",
    "HashOnlyHit",
    "HashOnlyIndex",
    "HitOutcome",
    "LayerPools",
    "PagePools",
    "ReferenceOps",
    "RequestReport",
    "SequenceLease",
    "ServeResult",
    "Session",
    "SessionFailedError",
    "TensorPageStore",
    "TritonOps",
    "UnguardedOps",
    "forward_chunk",
    "make_ops",
    "resolve_hit",
]
