"""The spec names the runtime drives: the embedding contract between a spec and this runtime.

Guards, effects, predicates and invariants all come from the spec.  What the runtime needs to know
by name is *which* events to propose for an operation (``append`` proposes ``open``/``append``/
``seal``) and which variables carry its bookkeeping (the frontier, the pin count, the generation).
``check_binding`` refuses a spec that lacks any of them, with the list of what is missing.

``SHIPPED_SPEC`` is the one place the default design's path is spelled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from morphcache.spec import loader
from morphcache.spec.model import Spec

from .errors import ConfigError

SHIPPED_SPEC = Path(loader.__file__).resolve().parent / "hybrid.yaml"  # installed beside morphcache.spec

# constants
C = "C"
# per-reader state
FRONTIER = "frontier"
SEQ = "seq"
GRAPH = "graph"
# per-page state
PIN = "pin"
GEN = "gen"
DEPTH = "depth"
FILL = "fill"
TAIL, COMPRESSED, INDEXER, WINDOW, TIER, POOL = "tail", "compressed", "indexer", "window", "tier", "pool"
# per-(reader, page) state
BLOCK, LEASE, LPIN, LGEN = "block", "lease", "lpin", "lgen"

# object -> states the runtime's policies name
STATES: dict[str, tuple[str, ...]] = {
    SEQ: ("idle", "active", "attaching"),
    BLOCK: ("out", "in"),
    TAIL: ("empty", "filling", "sealed", "released"),
    COMPRESSED: ("none", "building", "complete"),
    INDEXER: ("none", "built"),
    WINDOW: ("unwritten", "live", "expired"),
    TIER: ("gpu", "offloading", "host", "disk", "prefetching", "dropped"),
    POOL: ("private", "pooled"),
    LEASE: ("free", "held"),
    GRAPH: ("idle", "captured"),
}

EVENTS = (
    "register", "free", "begin_attach", "end_attach", "attach", "detach", "open", "append", "seal", "release_tail",
    "forget",
    "begin_compress", "finish_compress", "recompress", "build_index", "slide", "offload", "offload_done",
    "spill", "prefetch", "copy_done", "verify", "land", "corrupt", "drop", "recompute", "admit", "evict",
    "acquire", "acquire_tail", "read", "release", "release_last", "capture", "uncapture",
)
VARS = (FRONTIER, PIN, GEN, DEPTH, FILL, LPIN, LGEN)

# tier state -> where the page's payload lives
HOME = {"gpu": "gpu", "offloading": "gpu", "prefetching": "gpu", "host": "host", "disk": "disk", "dropped": None}


def lacking(spec: Spec, states: Mapping[str, tuple[str, ...]], events: Iterable[str], variables: Iterable[str],
            constants: Iterable[str]) -> list[str]:
    """What a part needs of ``spec`` and it lacks: objects and their states, events, variables,
    constants (``object 'tail'``, ``state 'tail.sealed'``, ...)."""
    out: list[str] = []
    for obj, names in states.items():
        if obj not in spec.objects:
            out.append(f"object '{obj}'")
            continue
        out += [f"state '{obj}.{s}'" for s in names if s not in spec.objects[obj].states]
    declared = {ev.name for ev in spec.events}
    out += [f"event '{e}'" for e in events if e not in declared]
    out += [f"variable '{v}'" for v in variables if v not in spec.vars]
    out += [f"constant '{c}'" for c in constants if c not in spec.constants]
    return out


def check_binding(spec: Spec) -> None:
    """Raise ConfigError naming every object, state, event or variable the runtime needs but the spec
    lacks."""
    missing = lacking(spec, STATES, EVENTS, VARS, (C,))
    if missing:
        raise ConfigError(f"spec '{spec.name}' cannot drive the runtime; missing: {', '.join(missing)}")
