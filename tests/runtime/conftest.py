"""Fixtures of the runtime tests (helpers live in rt_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import small_config

from morphcache.runtime import CacheManager


@pytest.fixture
def make_manager(tmp_path: Path) -> Iterator[Callable[..., CacheManager]]:
    """Factory of managers on the small configuration (closed at the end of the test)."""
    made: list[CacheManager] = []

    def make(spec: Any = None, disk: bool = True, **overrides: Any) -> CacheManager:
        cfg = small_config(tmp_path / f"m{len(made)}" if disk else None, **overrides)  # a disk directory each
        m = CacheManager(spec, cfg)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


@pytest.fixture
def mgr(make_manager: Callable[..., CacheManager]) -> CacheManager:
    """A small manager with host and disk tiers, recording steps, strict step properties."""
    return make_manager(record=True, strict=True)
