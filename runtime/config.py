"""RuntimeConfig: the sizes and policies a CacheManager runs with, and the spec constants they give.

The spec is checked on a tiny instance (``C: 2``, ``W: 3`` ...).  The runtime evaluates the same
expressions with the constants of the real deployment::

    spec constant   runtime value
    C               page_size          tokens per page
    W               window             sliding-window length in tokens
    CAPACITY        pool_capacity      pages in the reuse pool
    MAX_PIN         max_pin            concurrent leases per page
    POOL_PAGES      gpu_pages          GPU page slots
    (any other)     the spec's value, unless ``constants`` overrides it
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .policy import EvictionPolicy, policy_names

_POSITIVE = ("page_size", "gpu_pages", "max_pin", "top_k", "prefetch_workers", "max_sequence_tokens")
_NON_NEGATIVE = ("window", "host_pages", "disk_pages", "page_bytes")


@dataclass(frozen=True)
class RuntimeConfig:
    """Sizes, tiers and policy switches of one CacheManager.

    ``compress_block`` must divide ``page_size`` (default: one compressed entry per page).
    ``disk_dir`` None (and ``disk_pages`` 0) means no disk tier; a disk tier needs both (an empty
    path is an error, not a disabled tier).
    ``page_bytes`` 0 means "ask the page store".
    ``max_sequence_tokens`` bounds one sequence's length (longer appends are refused as bad input).
    ``room_ahead``: GPU pages made free beyond a write's need whenever room has to be made (a low
    watermark: fewer, larger rounds of offloading, each move still its own spec events); None means
    ``gpu_pages // 256`` (none for pools under 256 pages).  Only room made in one go goes ahead; room
    made one victim at a time stops at the need.
    ``backend`` "table" (fast, the default) or "machine" (every trigger goes through the
    ``transitions`` machines; slower, same decisions).  ``fast`` False evaluates every firing alone
    with the closure backend (the general path; batches fire one by one).  ``record`` keeps every
    fired step (projected) for the conformance checker; it does not switch the fast paths off.
    ``strict`` also evaluates the spec's step properties that read no ghost before each step.
    ``policy``: the eviction policy, an ``EvictionPolicy`` instance (owned by this manager) or a
    registered name (``policy.policy_names()``: "lru", the default, and the shipped policies).
    """

    page_size: int = 16
    window: int = 64
    gpu_pages: int = 1024
    host_pages: int = 4096
    disk_pages: int = 0
    pool_capacity: int | None = None
    max_pin: int = 64
    compress_block: int | None = None
    top_k: int = 8
    disk_dir: str | None = None
    prefetch_workers: int = 2
    page_bytes: int = 0
    max_sequence_tokens: int = 1 << 24
    room_ahead: int | None = None
    auto_compress: bool = True
    auto_admit: bool = True
    auto_slide: bool = True
    release_tails: bool = False
    backend: str = "table"
    record: bool = False
    strict: bool = False
    fast: bool = True
    policy: str | EvictionPolicy = "lru"
    constants: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in _POSITIVE:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RuntimeConfig.{name} must be a positive int, got {value!r}")
        for name in _NON_NEGATIVE:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"RuntimeConfig.{name} must be an int >= 0, got {value!r}")
        for name in ("pool_capacity", "room_ahead"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"RuntimeConfig.{name} must be an int >= 0 or None, got {value!r}")
        block = self.block
        if isinstance(block, bool) or not isinstance(block, int) or block < 1 or self.page_size % block:
            raise ConfigError(
                f"RuntimeConfig.compress_block must divide page_size {self.page_size}, got {block!r}"
            )
        if self.backend not in ("table", "machine"):
            raise ConfigError(f"RuntimeConfig.backend must be 'table' or 'machine', got {self.backend!r}")
        if self.disk_pages and self.disk_dir is None:
            raise ConfigError("RuntimeConfig.disk_pages > 0 needs a disk_dir")
        if self.disk_dir is not None:
            if not isinstance(self.disk_dir, (str, Path)) or not str(self.disk_dir).strip():
                raise ConfigError(f"RuntimeConfig.disk_dir must be a non-empty path or None (no disk tier), "
                                  f"got {self.disk_dir!r}")
            if not self.disk_pages:
                raise ConfigError("RuntimeConfig.disk_dir is set but disk_pages is 0: give disk_pages, or leave "
                                  "disk_dir None for no disk tier")
        if not isinstance(self.policy, EvictionPolicy) and (not isinstance(self.policy, str)
                                                            or self.policy not in policy_names()):
            raise ConfigError(f"RuntimeConfig.policy must be an EvictionPolicy or one of {list(policy_names())}, "
                              f"got {self.policy!r}")
        for key, value in self.constants.items():
            if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"RuntimeConfig.constants: {key!r} must map to an int, got {value!r}")

    @property
    def block(self) -> int:
        """Tokens per compressed entry."""
        return self.page_size if self.compress_block is None else self.compress_block

    @property
    def capacity(self) -> int:
        """Reuse-pool capacity in pages (default: the GPU pool size)."""
        return self.gpu_pages if self.pool_capacity is None else self.pool_capacity

    @property
    def ahead(self) -> int:
        """GPU pages room making frees beyond the need (``room_ahead``, default ``gpu_pages // 256``)."""
        return self.gpu_pages // 256 if self.room_ahead is None else self.room_ahead

    def spec_constants(self, spec_constants: Mapping[str, int]) -> dict[str, int]:
        """The spec's constants with the runtime's values substituted (see the module table)."""
        mapped = {
            "C": self.page_size,
            "W": self.window,
            "CAPACITY": self.capacity,
            "MAX_PIN": self.max_pin,
            "POOL_PAGES": self.gpu_pages,
        }
        out = dict(spec_constants)
        for key, value in mapped.items():
            if key in out:
                out[key] = value
        out.update(self.constants)
        return out
