"""``Pipeline.recheck``: a lease's ``read`` is decided again only when state changed since it passed.

The claim behind it is ``Pipeline.version``: every write of spec state is a counted firing of an event
that changes state (a rollback takes its firings back with its writes), so an unchanged version means
an unchanged state, and a guard decides the same.  (The engine's ``SequenceLease`` also trusts it for
its own pages' GPU slots, which move only with tier events: the machine checks those too.)  The random
machine of ``test_runtime_stateful`` checks that claim on every step (faults, rollbacks, copies in
flight included) and checks every memoized lease against a fresh evaluation of the guard.  The unit
tests show a change that makes a lease stale is seen, and that the same test fails when the version
is not consulted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test
from rt_helpers import small_config
from test_runtime_stateful import ALLOWED, CacheMachine

from morphcache.runtime import CacheManager, ConfigError, StaleLeaseError


def _state(m: CacheManager) -> tuple[Any, ...]:
    """Every spec value and GPU slot of every live page, every spec value of every live reader, the
    live ids."""
    store = m.parts.pipe.store
    pages, readers = sorted(store.live_pages), sorted(store.live_readers)
    records = m.parts.pages.records
    return (pages, readers, [records[p].gpu_slot if p in records else None for p in pages],
            {name: [col[p] for p in pages] for name, col in store.cols.items()},
            {name: [col[r] for r in readers] for name, col in store.rcols.items()},
            {name: {r: dict(row) for r, row in rows.items() if row} for name, rows in store.rp.items()})


class RecheckMachine(CacheMachine):
    """The stateful machine's rules, not in strict mode (which decides every read again)."""

    overrides: ClassVar[dict[str, Any]] = {**CacheMachine.overrides, "strict": False}
    memo_checked: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        self.last: tuple[int, tuple[Any, ...]] | None = None

    @rule(prefix=st.integers(0, 2), n=st.integers(3, 20))
    def register_and_acquire(self, prefix: int, n: int) -> None:
        self.count += 1
        try:
            self.m.register(f"s{self.count}", self._tokens(prefix, n, 0))
            self.leases.append(self.m.acquire(f"s{self.count}"))
        except ALLOWED:
            pass

    @rule()
    def read_every_lease(self) -> None:
        for i in range(len(self.leases)):  # the stateful machine's read of each (payloads checked, stale ones too)
            self.read(i)

    @invariant()
    def same_version_same_state(self) -> None:
        m = self.m
        m.wait_prefetches()
        with m.lock:
            now = (m.parts.pipe.version(), _state(m))
        if self.last is not None and self.last[0] == now[0]:
            assert self.last[1] == now[1], "state changed without a counted firing"
        self.last = now

    @invariant()
    def memo_agrees_with_the_guard(self) -> None:
        m = self.m
        pipe = m.parts.pipe
        with m.lock:
            version = pipe.version()
            for lease in self.leases:
                if lease.released or lease.passed != version:
                    continue
                allowed = pipe.allower("read")
                assert all(allowed(lease.reader, pid) for pid in lease.pinned), f"lease #{lease.lease_id}"
                type(self).memo_checked += 1


def test_version_tracks_state_and_memo_matches_the_guard() -> None:
    RecheckMachine.memo_checked = 0
    run_state_machine_as_test(RecheckMachine, settings=settings(
        max_examples=60, stateful_step_count=40, deadline=None, derandomize=True, database=None,
        suppress_health_check=[HealthCheck.too_slow]))
    assert RecheckMachine.memo_checked >= 50, RecheckMachine.memo_checked


def _tail_lease(tmp: Path) -> tuple[CacheManager, Any]:
    """A manager and a lease over sequence 'a''s pages, its partial last page included."""
    m = CacheManager(config=small_config(tmp))
    m.register("a", list(range(1, 11)))  # C = 4: two whole pages and a partial one
    lease = m.acquire("a")
    assert lease.tail is not None
    return m, lease


def test_an_unchanged_state_is_counted_not_decided_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m, lease = _tail_lease(tmp_path)
    pipe = m.parts.pipe
    batches: list[str] = []
    real = pipe.fire_batch
    monkeypatch.setattr(pipe, "fire_batch", lambda name, *a, **k: batches.append(name) or real(name, *a, **k))
    before = m.metrics().events_fired.get("read", 0)
    m.read(lease)
    m.read(lease)
    assert batches == ["read"]  # the second read: nothing fired since the first passed
    assert m.metrics().events_fired["read"] - before == 2 * len(lease.pinned)  # both counted
    m.append("a", [99])  # state changed: decided again
    m.read(lease)
    assert batches == ["read", "read"]
    m.check_integrity()
    m.release(lease)
    m.close()


def test_a_change_that_makes_the_lease_stale_is_seen(tmp_path: Path) -> None:
    m, lease = _tail_lease(tmp_path)
    m.read(lease)
    m.free("a")  # the partial last page, readable to its own sequence alone, is no longer anyone's
    with pytest.raises(StaleLeaseError):
        m.read(lease)
    m.release(lease)
    m.close()


def test_the_same_check_fails_when_the_version_is_not_consulted(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    m, lease = _tail_lease(tmp_path)
    m.read(lease)
    monkeypatch.setattr(m.parts.pipe, "version", lambda: lease.passed)  # a version that never moves
    m.free("a")
    m.read(lease)  # the stale read goes through: the memo is only as good as the version
    monkeypatch.undo()
    with pytest.raises(StaleLeaseError):
        m.read(lease)
    m.release(lease)
    m.close()


def test_recheck_refuses_an_event_that_changes_state(tmp_path: Path) -> None:
    m = CacheManager(config=small_config(tmp_path))
    with pytest.raises(ConfigError, match="changes state"):
        m.parts.pipe.recheck("evict", None, np.zeros(1, dtype=np.int64), None)
    assert "read" in m.parts.pipe.pure and "evict" not in m.parts.pipe.pure
    m.close()


def test_strict_mode_decides_every_read(tmp_path: Path) -> None:
    m = CacheManager(config=small_config(tmp_path, strict=True))
    m.register("a", list(range(1, 11)))
    lease = m.acquire("a")
    m.read(lease)
    assert lease.passed is None
    m.release(lease)
    m.close()
