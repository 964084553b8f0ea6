"""EngineConfig: the model, the pool sizes and the mode of one Engine, and the RuntimeConfig it gives.

The runtime runs with the model's page size and window (spec constants C and W), and with
``auto_compress`` off: a page's KV exists only once the engine's forward has stored it, after the
runtime opened and sealed the page, so the engine proposes ``compress`` itself right after the
forward (the runtime still slides windows and admits pages on its own).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from morphcache.model import MODEL_CONFIGS, ModelConfig, model_config
from morphcache.runtime import RuntimeConfig, policy_names

OPS = ("triton", "reference")
WEIGHTS = ("seeded", "trained")
FULL_WINDOW_CONTEXT = 4096  # default longest sequence of a model whose window exceeds it (see runtime_window)


def model_name(config: ModelConfig) -> str | None:
    """The name of a shipped configuration equal to ``config`` ("hybrid", "gdn-hybrid"), else None."""
    return next((name for name, known in MODEL_CONFIGS.items() if known == config), None)


@dataclass(frozen=True)
class EngineConfig:
    """Sizes and switches of an Engine.

    ``gpu_pages``: page slots of the GPU pool (the data plane's tensors); ``host_pages`` /
    ``disk_pages`` (with ``disk_dir``): the lower tiers.  ``ops``: "triton" (the kernels) or
    "reference" (plain-torch references behind the same interface).  ``unsafe``: hash-only hits,
    no validation, no recovery, generation guard off (to show the drift it causes).
    ``release_windows``: free the window layers' raw KV of pages that slid out of the window.
    ``policy``: the registered name of the eviction policy that proposes victims when a tier or the
    reuse pool is full (``"lru"``, ``"flop"``, ``"semantic"``, ``"saecache"``; see ``runtime/policy.py``).
    ``pool_capacity``: pages the reuse pool may hold (default: all tiers together).
    ``model``: the model's configuration (``named("gdn-hybrid")`` for the GDN hybrid); ``weights``:
    "seeded" (``HybridModel(model, seed)``) or "trained" (the shipped trained weights of a named
    configuration).  ``state_slots``: working recurrent-state slots (live sequences at once) of the
    linear layers.  ``max_context``: the longest sequence (prompt + decoded tokens) served; default
    unbounded, except for a model whose window exceeds ``FULL_WINDOW_CONTEXT`` (see
    ``runtime_window``).  ``record``: the runtime keeps every fired step for the conformance checker
    (``CacheManager.steps``).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    seed: int = 0
    weights: str = "seeded"
    state_slots: int = 4
    max_context: int | None = None
    gpu_pages: int = 64
    host_pages: int = 64
    disk_pages: int = 0
    disk_dir: str | None = None
    pool_capacity: int | None = None
    ops: str = "triton"
    unsafe: bool = False
    release_windows: bool = True
    prefetch_workers: int = 1
    device: str = "cpu"
    policy: str = "lru"
    record: bool = False

    def __post_init__(self) -> None:
        if self.ops not in OPS:
            raise ValueError(f"EngineConfig.ops must be one of {', '.join(OPS)}, got {self.ops!r}")
        if self.gpu_pages < 2:
            raise ValueError(f"EngineConfig.gpu_pages must be >= 2, got {self.gpu_pages}")
        if self.weights not in WEIGHTS:
            raise ValueError(f"EngineConfig.weights must be one of {', '.join(WEIGHTS)}, got {self.weights!r}")
        if self.weights == "trained" and model_name(self.model) is None:
            raise ValueError("EngineConfig.weights='trained' needs a shipped model configuration "
                             f"({', '.join(sorted(MODEL_CONFIGS))})")
        if self.state_slots < 1:
            raise ValueError(f"EngineConfig.state_slots must be >= 1, got {self.state_slots}")
        if self.max_context is not None and self.max_context < 1:
            raise ValueError(f"EngineConfig.max_context must be >= 1, got {self.max_context}")
        if self.policy not in policy_names():
            raise ValueError(f"EngineConfig.policy must be one of {', '.join(policy_names())}, got {self.policy!r}")

    @classmethod
    def named(cls, model: str, **fields: object) -> EngineConfig:
        """A config for the shipped model configuration ``model`` ("hybrid" or "gdn-hybrid")."""
        return cls(model=model_config(model), **fields)  # type: ignore[arg-type]

    @property
    def capacity(self) -> int:
        """Reuse-pool capacity in pages: ``pool_capacity``, by default every tier's pages (a page
        offloaded to host or disk stays cached)."""
        if self.pool_capacity is not None:
            return self.pool_capacity
        return self.gpu_pages + self.host_pages + self.disk_pages

    @property
    def context_limit(self) -> int | None:
        """The longest sequence served: ``max_context``, else ``FULL_WINDOW_CONTEXT`` for a model whose
        window exceeds it (the GDN hybrid's full-attention layers), else none."""
        if self.max_context is not None:
            return self.max_context
        return FULL_WINDOW_CONTEXT if self.model.window > FULL_WINDOW_CONTEXT else None

    @property
    def runtime_window(self) -> int:
        """The window W the runtime tracks: the model's, cut to the context limit.

        A window layer whose window exceeds every sequence served (W = 2^20: full attention) and one
        whose window equals the longest sequence served see the same positions, so the cut changes no
        read; the runtime refuses longer sequences (``max_sequence_tokens``), so no page it slides out
        is ever read.  The cut keeps the runtime's setup cost, which grows with W, small.
        ::

            model W = 2^20, limit 4096:   runtime W = 4096, sequences <= 4096 tokens:
                                          pos - W < 0 <= (p + 1) * C for every page: nothing slides
        """
        limit = self.context_limit
        return self.model.window if limit is None else min(self.model.window, limit)

    def runtime_config(self) -> RuntimeConfig:
        """The CacheManager's configuration (C, top-k from the model, W from ``runtime_window``, the
        context limit as the runtime's ``max_sequence_tokens`` and as the spec's R, the largest replay
        budget a request may opt in with: a budget is at most a whole prompt)."""
        m = self.model
        limit = self.context_limit
        config = RuntimeConfig(
            page_size=m.page_size,
            window=self.runtime_window,
            top_k=m.top_k,
            gpu_pages=self.gpu_pages,
            host_pages=self.host_pages,
            disk_pages=self.disk_pages,
            disk_dir=self.disk_dir,
            pool_capacity=self.capacity,
            prefetch_workers=self.prefetch_workers,
            auto_compress=False,
            auto_admit=True,
            auto_slide=True,
            policy=self.policy,
            record=self.record,
        )
        if limit is not None:
            config = dataclasses.replace(config, max_sequence_tokens=limit)
        return dataclasses.replace(config, constants={"R": config.max_sequence_tokens})
