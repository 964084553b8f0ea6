"""EngineConfig: the model, the pool sizes and the mode of one Engine, and the RuntimeConfig it gives.

The runtime runs with the model's page size and window (spec constants C and W), and with
``auto_compress`` off: a page's KV exists only once the engine's forward has stored it, after the
runtime opened and sealed the page, so the engine proposes ``compress`` itself right after the
forward (the runtime still slides windows and admits pages on its own).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from morphcache.model import ModelConfig
from morphcache.runtime import RuntimeConfig

OPS = ("triton", "reference")


@dataclass(frozen=True)
class EngineConfig:
    """Sizes and switches of an Engine.

    ``gpu_pages``: page slots of the GPU pool (the data plane's tensors); ``host_pages`` /
    ``disk_pages`` (with ``disk_dir``): the lower tiers.  ``ops``: "triton" (the kernels) or
    "reference" (plain-torch references behind the same interface).  ``unsafe``: hash-only hits,
    no validation, no recovery, generation guard off (to show the drift it causes).
    ``release_windows``: free the window layers' raw KV of pages that slid out of the window.
    ``pool_capacity``: pages the reuse pool may hold (default: all tiers together).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    seed: int = 0
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

    def __post_init__(self) -> None:
        if self.ops not in OPS:
            raise ValueError(f"EngineConfig.ops must be one of {', '.join(OPS)}, got {self.ops!r}")
        if self.gpu_pages < 2:
            raise ValueError(f"EngineConfig.gpu_pages must be >= 2, got {self.gpu_pages}")

    @property
    def capacity(self) -> int:
        """Reuse-pool capacity in pages: ``pool_capacity``, by default every tier's pages (a page
        offloaded to host or disk stays cached)."""
        if self.pool_capacity is not None:
            return self.pool_capacity
        return self.gpu_pages + self.host_pages + self.disk_pages

    def runtime_config(self) -> RuntimeConfig:
        """The CacheManager's configuration (C, W and top-k from the model)."""
        m = self.model
        return RuntimeConfig(
            page_size=m.page_size,
            window=m.window,
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
        )
