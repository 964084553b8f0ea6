"""Helpers of the runtime tests: a small configuration, spec variants, token runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from morphcache.runtime import SHIPPED_SPEC, RuntimeConfig

SMALL = dict(page_size=4, window=6, gpu_pages=16, host_pages=8, disk_pages=8, pool_capacity=8, max_pin=4)


def small_config(tmp: Path | None = None, **overrides: Any) -> RuntimeConfig:
    """C=4, W=6 and small tiers, so every policy path is reached in a few steps."""
    opts: dict[str, Any] = dict(SMALL)
    if tmp is not None:
        opts["disk_dir"] = str(tmp / "disk")
    else:
        opts["disk_pages"] = 0
    opts.update(overrides)
    return RuntimeConfig(**opts)


def spec_variant(tmp: Path, edits: dict[str, Any], name: str = "variant.yaml") -> Path:
    """A copy of the shipped spec with ``edits`` applied (dotted paths, e.g.
    ``objects.tier.events.offload.guard``); a value of None deletes the key."""
    doc = yaml.safe_load(SHIPPED_SPEC.read_text(encoding="utf-8"))
    for dotted, value in edits.items():
        node = doc
        keys = dotted.split(".")
        for key in keys[:-1]:
            node = node[key]
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    path = tmp / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def toks(start: int, n: int) -> list[int]:
    """``n`` distinct tokens starting at ``start``."""
    return list(range(start, start + n))
