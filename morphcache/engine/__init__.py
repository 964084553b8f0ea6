"""morphcache.engine: the reference model served end to end through the runtime and the kernels.

- Engine / EngineConfig: serve requests (lookup, recovery, lease, cached prefill and decode).
- TensorPageStore / PagePools: the runtime's data plane over paged tensor pools.
- StatePools: the linear layers' recurrent states (working slots, checkpoint area).
- forward_chunk / replay_chunk: the layer-by-layer cached forward through the kernels, and the
  replay that rebuilds linear layers' state.
- resolve_hit: a lookup answer turned into a lease by executing the recovery plan.
- choose_path / StatePlan: how a request's linear-layer state is rebuilt at its hit boundary
  (exact recompute, opt-in Tail-Replay, or the unsafe mode's trust).
"""

from morphcache.engine.approximate import Divergence, WithdrawError, divergence
from morphcache.engine.config import EngineConfig
from morphcache.engine.engine import Engine
from morphcache.engine.forward import forward_chunk, replay_chunk
from morphcache.engine.hashonly import HashOnlyHit, HashOnlyIndex
from morphcache.engine.lease import FixedLease, SequenceLease
from morphcache.engine.mixers import RecurrentSlot
from morphcache.engine.ops import AttentionOps, ReferenceOps, TritonOps, UnguardedOps, make_ops
from morphcache.engine.pools import LayerPools, PagePools
from morphcache.engine.rebuild import (
    CheckpointSource,
    ExactRecompute,
    NoCheckpoints,
    StatePlan,
    TailReplay,
    TrustSlot,
    ZeroState,
    choose_path,
)
from morphcache.engine.recovery import HitOutcome, resolve_hit
from morphcache.engine.report import RequestReport, ServeResult
from morphcache.engine.session import EngineCapacityError, Session, SessionFailedError
from morphcache.engine.states import StatePools, StateSlotsExhaustedError
from morphcache.engine.store import TensorPageStore

__all__ = [
    "AttentionOps",
    "CheckpointSource",
    "Divergence",
    "Engine",
    "EngineCapacityError",
    "EngineConfig",
    "ExactRecompute",
    "FixedLease",
    "HashOnlyHit",
    "HashOnlyIndex",
    "HitOutcome",
    "LayerPools",
    "NoCheckpoints",
    "PagePools",
    "RecurrentSlot",
    "ReferenceOps",
    "RequestReport",
    "SequenceLease",
    "ServeResult",
    "Session",
    "SessionFailedError",
    "StatePlan",
    "StatePools",
    "StateSlotsExhaustedError",
    "TailReplay",
    "TensorPageStore",
    "TritonOps",
    "TrustSlot",
    "UnguardedOps",
    "WithdrawError",
    "ZeroState",
    "choose_path",
    "divergence",
    "forward_chunk",
    "make_ops",
    "replay_chunk",
    "resolve_hit",
]
