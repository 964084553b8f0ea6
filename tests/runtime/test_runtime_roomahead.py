"""Room made ahead (``RuntimeConfig.room_ahead``, a low watermark): when a write finds too few free GPU
slots, room made in one go frees ``ahead`` pages more, so the writes after it find their room made.
The extra victims are ordinary moves (spec events, integrity after every step); with ``room_ahead=0``
the pool runs exactly as it did before; bad values are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from rt_helpers import small_config, toks

from morphcache.runtime import CacheManager, RuntimeConfig
from morphcache.runtime.errors import ConfigError


def _fill(m: CacheManager, n: int, c: int) -> None:
    """``n`` sequences of 3 sealed pages each, freed (their pages stay cached on the GPU)."""
    for i in range(n):
        m.register(f"s{i}")
        m.append(f"s{i}", toks(1000 * (i + 1), 3 * c))
        m.check_integrity()
        m.free(f"s{i}")
        m.check_integrity()


@pytest.mark.parametrize("ahead", [0, 3, 5])
def test_room_ahead_frees_the_need_plus_ahead(tmp_path: Path, ahead: int) -> None:
    cfg = small_config(tmp_path, gpu_pages=12, host_pages=64, disk_pages=64, pool_capacity=64,
                       room_ahead=ahead)
    assert cfg.ahead == ahead
    with CacheManager(config=cfg) as m:
        c = cfg.page_size
        _fill(m, 4, c)  # 12 GPU pages in use
        slots = m.parts.storage.slots
        assert not slots.free_slots
        m.register("w")
        m.append("w", toks(90_000, c))  # one page: short by one
        m.check_integrity()
        assert len(slots.free_slots) == ahead  # the need taken by the write, the rest left free
        moved = m.metrics().bytes_moved["gpu->host"]
        m.append("w", toks(90_000 + c, c))
        m.check_integrity()
        if ahead:  # the next page's room was made already
            assert m.metrics().bytes_moved["gpu->host"] == moved


def test_room_ahead_defaults_to_a_fraction_of_the_pool() -> None:
    assert RuntimeConfig(gpu_pages=255).ahead == 0
    assert RuntimeConfig(gpu_pages=4096).ahead == 16
    assert RuntimeConfig(gpu_pages=4096, room_ahead=0).ahead == 0


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4"])
def test_room_ahead_refuses_bad_values(bad: object) -> None:
    with pytest.raises(ConfigError, match="room_ahead"):
        RuntimeConfig(room_ahead=bad)  # type: ignore[arg-type]
