"""``SequenceLease.check_live``: a sequence's own pages are read again only when the manager's
``version`` moved since they last checked out; a move of one is still seen, and the same check fails
when the version is not consulted."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from morphcache.engine.lease import SequenceLease
from morphcache.runtime import CacheManager, RuntimeConfig, StaleLeaseError


def _own_lease() -> tuple[CacheManager, SequenceLease]:
    """A manager and the kernel lease of sequence 'a' (C = 4: two sealed pages and a partial one, all
    its own, none leased from the runtime)."""
    m = CacheManager(config=RuntimeConfig(page_size=4, window=6, gpu_pages=32, host_pages=8, disk_pages=0))
    m.register("a", list(range(1, 11)))
    return m, SequenceLease(m, "a", None, torch.device("cpu"))


def _spy(m: CacheManager, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real = m.page_values
    monkeypatch.setattr(m, "page_values", lambda *a: calls.append(a) or real(*a))
    return calls


def test_own_pages_are_read_again_only_after_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    m, lease = _own_lease()
    reads = _spy(m, monkeypatch)
    lease.check_live()
    lease.check_live()
    assert len(reads) == 1  # nothing fired in between
    m.register("b", [7, 8, 9])  # another sequence's write: read again (and still live)
    lease.check_live()
    assert len(reads) == 2
    m.close()


def test_a_moved_own_page_is_seen() -> None:
    m, lease = _own_lease()
    lease.check_live()
    m.offload(m.sequence_pages("a")[0])  # sealed, compressed, unpinned: it may leave the GPU
    with pytest.raises(StaleLeaseError, match="own page"):
        lease.check_live()
    m.close()


def test_the_same_check_fails_when_the_version_is_not_consulted(monkeypatch: pytest.MonkeyPatch) -> None:
    m, lease = _own_lease()
    lease.check_live()
    monkeypatch.setattr(m, "version", lambda: lease.passed)  # a version that never moves
    m.offload(m.sequence_pages("a")[0])
    lease.check_live()  # the move goes unseen: the memo is only as good as the version
    monkeypatch.undo()
    with pytest.raises(StaleLeaseError):
        lease.check_live()
    m.close()
