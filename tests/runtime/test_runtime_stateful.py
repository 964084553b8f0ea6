"""Hypothesis stateful test: random interleavings of every operation, check_integrity() after each step.

Also checked on every lookup: the effective hit equals a brute-force oracle over freshly evaluated
ready predicates; on every read: the payload of every leased page is the one its tokens give.
The same machine on a weakened spec (offload without the pin check) must fail.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from rt_helpers import small_config, spec_variant

from morphcache.runtime import (
    CacheManager,
    CapacityError,
    GuardRefused,
    IntegrityError,
    Lease,
    Miss,
    NeedsRecovery,
    Ready,
    RecoveryPlan,
    StaleLeaseError,
    expected_payload,
)
from morphcache.testing import diskdamage

PREFIXES = [list(range(1, 21)), list(range(1, 9)) + list(range(50, 62)), list(range(70, 88))]
ALLOWED = (GuardRefused, CapacityError)
DAMAGE: dict[str, Callable[[Any, int], None]] = {  # a page's record on disk: last byte flipped, cut short, gone
    "flip": lambda disk, pid: diskdamage.flip(disk, pid, (-1,), 1),
    "truncate": lambda disk, pid: diskdamage.truncate(disk, pid, 3),
    "delete": diskdamage.delete,
}


class CacheMachine(RuleBasedStateMachine):
    """Drives one CacheManager (C=4, W=6, 10 GPU pages, 4 host, 4 disk, pool of 5, 3 pins)."""

    spec: ClassVar[Any] = None
    steps_run: ClassVar[int] = 0
    overrides: ClassVar[dict[str, Any]] = dict(gpu_pages=10, host_pages=4, disk_pages=4, pool_capacity=5,
                                               max_pin=3, strict=True)

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="mc-stateful-")
        cfg = small_config(Path(self.tmp), **self.overrides)
        self.m = CacheManager(self.spec, cfg)
        self.count = 0
        self.leases: list[Lease] = []
        self.plans: list[RecoveryPlan] = []

    def teardown(self) -> None:
        self.m.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------------------
    def _page(self, i: int) -> int | None:
        pages = sorted(self.m.page_ids())
        return pages[i % len(pages)] if pages else None

    def _seq(self, i: int) -> str | None:
        seqs = sorted(self.m.sequences())
        return seqs[i % len(seqs)] if seqs else None

    def _tokens(self, prefix: int, n: int, tail: int) -> list[int]:
        toks = PREFIXES[prefix][:n] + [100 + tail] * (tail % 3)
        return toks[: self.m.config.max_sequence_tokens]

    # -- rules --------------------------------------------------------------------------------------
    @rule(prefix=st.integers(0, 2), n=st.integers(3, 20), tail=st.integers(0, 5))
    def register(self, prefix: int, n: int, tail: int) -> None:
        self.count += 1
        try:
            self.m.register(f"s{self.count}", self._tokens(prefix, n, tail))
        except ALLOWED:
            pass

    @rule(i=st.integers(0, 9), toks=st.lists(st.integers(0, 12), max_size=6))
    def append(self, i: int, toks: list[int]) -> None:
        sid = self._seq(i)
        if sid is not None:
            try:
                room = self.m.config.max_sequence_tokens - self.m.frontier(sid)
                self.m.append(sid, toks[:room])
            except ALLOWED:
                pass

    @rule(prefix=st.integers(0, 2), n=st.integers(3, 20), tail=st.integers(0, 5), attach=st.booleans())
    def lookup(self, prefix: int, n: int, tail: int, attach: bool) -> None:
        tokens = self._tokens(prefix, n, tail)
        m = self.m
        nominal, oracle = m.parts.lookups.oracle(tokens)  # closures on every page, every position tried
        try:
            res = m.lookup(tokens)
        except ALLOWED:
            return
        if isinstance(res, Ready):
            assert res.lease.tokens == oracle and res.nominal == nominal
            if attach:
                self.count += 1
                sid = f"s{self.count}"
                m.register(sid)
                try:
                    m.attach(sid, res.lease)
                except ALLOWED:
                    pass
            self.leases.append(res.lease)
        elif isinstance(res, NeedsRecovery):
            assert res.plan.effective == oracle and res.plan.nominal == nominal
            self.plans.append(res.plan)
        else:
            assert isinstance(res, Miss) and (nominal == 0 or oracle == 0)

    @rule(i=st.integers(0, 40), how=st.sampled_from(["flip", "truncate", "delete"]))
    def spill_damage_prefetch(self, i: int, how: str) -> None:
        pid = self._page(i)
        if pid is None or self.m.disk is None:
            return
        try:
            self.m.offload(pid, "disk")
        except ALLOWED:
            return
        DAMAGE[how](self.m.disk, pid)
        try:
            self.m.prefetch(pid).result()
        except ALLOWED:
            pass
        if pid in self.m.page_ids():  # a damaged page never lands (dropped, or still on disk if refused)
            assert self.m.page_state(pid)["tier"] in ("dropped", "disk")

    @rule(prefix=st.integers(0, 1), n=st.integers(8, 20), attach=st.booleans())
    def lookup_shared_head(self, prefix: int, n: int, attach: bool) -> None:
        self.lookup(prefix, n, 0, attach)

    @rule(i=st.integers(0, 9))
    def read(self, i: int) -> None:
        if not self.leases:
            return
        lease = self.leases[i % len(self.leases)]
        try:
            view = self.m.read(lease, payloads=True)
        except StaleLeaseError:  # only a sequence's own partial page, readable to it alone, once it is freed
            assert lease.tail is not None and lease.owner not in self.m.sequences()
            return
        assert view.payloads is not None
        for pid, payload in zip(lease.pinned, view.payloads, strict=True):
            st_ = self.m.page_state(pid)
            assert payload == expected_payload(st_["tokens"], st_["depth"], self.m.C), f"page {pid}"

    @rule(i=st.integers(0, 9))
    def release(self, i: int) -> None:
        if self.leases:
            self.m.release(self.leases.pop(i % len(self.leases)))

    @rule(i=st.integers(0, 9))
    def recover(self, i: int) -> None:
        if self.plans:
            self.m.recover(self.plans.pop(i % len(self.plans)))

    def _page_call(self, i: int, call: Any) -> None:
        pid = self._page(i)
        if pid is not None:
            try:
                call(pid)
            except ALLOWED:
                pass

    @rule(i=st.integers(0, 40), disk=st.booleans())
    def offload(self, i: int, disk: bool) -> None:
        self._page_call(i, lambda pid: self.m.offload(pid, "disk" if disk else "host"))

    @rule(i=st.integers(0, 40))
    def drop(self, i: int) -> None:
        self._page_call(i, self.m.drop)

    @rule(i=st.integers(0, 40))
    def evict(self, i: int) -> None:
        self._page_call(i, self.m.evict)

    @rule(i=st.integers(0, 40))
    def admit(self, i: int) -> None:
        self._page_call(i, self.m.admit)

    @rule(i=st.integers(0, 40))
    def compress(self, i: int) -> None:
        self._page_call(i, self.m.compress)

    @rule(i=st.integers(0, 40), index=st.booleans())
    def recompress(self, i: int, index: bool) -> None:
        self._page_call(i, self.m.recompress)
        if index:
            self._page_call(i, self.m.build_index)

    @rule(i=st.integers(0, 40))
    def release_tail(self, i: int) -> None:
        self._page_call(i, self.m.release_tail)

    @rule(i=st.integers(0, 40), how=st.sampled_from(["flip", "truncate", "delete"]), fetch=st.booleans())
    def damage_disk_page(self, i: int, how: str, fetch: bool) -> None:
        disk = self.m.disk
        on_disk = sorted(p for p in self.m.page_ids() if self.m.page_state(p)["tier"] == "disk")
        if disk is None or not on_disk:
            return
        DAMAGE[how](disk, on_disk[i % len(on_disk)])
        if fetch:
            try:
                self.m.prefetch(on_disk[i % len(on_disk)]).result()
            except ALLOWED:
                pass

    @rule(i=st.integers(0, 40), block=st.booleans())
    def prefetch_offloaded(self, i: int, block: bool) -> None:
        off = sorted(p for p in self.m.page_ids() if self.m.page_state(p)["tier"] in ("host", "disk"))
        if off:
            try:
                fut = self.m.prefetch(off[i % len(off)])
            except ALLOWED:
                return
            if block:
                fut.result()

    @rule(prefix=st.integers(0, 2), n=st.integers(4, 20))
    def lookup_and_recover(self, prefix: int, n: int) -> None:
        try:
            res = self.m.lookup(PREFIXES[prefix][:n])
        except ALLOWED:
            return
        if isinstance(res, Ready):
            self.m.release(res.lease)
        elif isinstance(res, NeedsRecovery):
            self.m.recover(res.plan)

    @rule()
    def wait(self) -> None:
        self.m.wait_prefetches()

    def _seq_call(self, i: int, call: Any) -> None:
        sid = self._seq(i)
        if sid is not None:
            try:
                call(sid)
            except ALLOWED:
                pass

    @rule(i=st.integers(0, 9))
    def free(self, i: int) -> None:
        self._seq_call(i, self.m.free)

    @rule(i=st.integers(0, 9))
    def slide(self, i: int) -> None:
        self._seq_call(i, self.m.slide)

    @rule(i=st.integers(0, 9), on=st.booleans())
    def capture(self, i: int, on: bool) -> None:
        self._seq_call(i, lambda sid: (self.m.capture if on else self.m.uncapture)([sid]))

    @rule(i=st.integers(0, 9))
    def acquire(self, i: int) -> None:
        self._seq_call(i, lambda sid: self.leases.append(self.m.acquire(sid)))

    @invariant()
    def integrity(self) -> None:
        type(self).steps_run += 1
        self.m.wait_prefetches()
        self.m.check_integrity()


def test_random_interleavings_keep_integrity() -> None:
    CacheMachine.steps_run = 0
    run_state_machine_as_test(CacheMachine, settings=settings(
        max_examples=80, stateful_step_count=50, deadline=None, derandomize=True, database=None,
        suppress_health_check=[HealthCheck.too_slow]))
    assert CacheMachine.steps_run >= 2000


class ConformanceMachine(CacheMachine):
    """The same rules at the checked instance's constants (C=2, W=3, CAPACITY=2, MAX_PIN=2, views of at
    most 3 pages), recording every step; the Z3 trace checker must accept each one."""

    overrides: ClassVar[dict[str, Any]] = dict(page_size=2, window=3, gpu_pages=6, host_pages=3, disk_pages=3,
                                               pool_capacity=2, max_pin=2, max_sequence_tokens=6, record=True)
    checked: ClassVar[int] = 0

    @invariant()
    def conforms(self) -> None:
        from morphcache.proofs.conformance import check_step
        steps = self.m.steps()
        seen = getattr(self, "seen", 0)
        for s in steps[seen:]:  # each recorded step is checked once
            why = check_step(self.m.spec, self.m.constants, s.before, s.event, s.args, s.after)
            assert why is None, f"{s.event}{s.args} in {s.view}: {why}"
            type(self).checked += 1
        self.seen = len(steps)


def test_random_interleavings_conform_to_the_spec() -> None:
    ConformanceMachine.checked = 0
    run_state_machine_as_test(ConformanceMachine, settings=settings(
        max_examples=40, stateful_step_count=40, deadline=None, derandomize=True, database=None,
        suppress_health_check=[HealthCheck.too_slow]))
    assert ConformanceMachine.checked >= 300, ConformanceMachine.checked


def test_weakened_spec_fails_the_same_machine(tmp_path_factory: pytest.TempPathFactory) -> None:
    weak = spec_variant(tmp_path_factory.mktemp("weak"), {
        "objects.tier.events.offload.guard": "tail[p] in {'sealed', 'released'} and compressed[p] != 'building'"})

    class WeakMachine(CacheMachine):
        spec = weak

    with pytest.raises((IntegrityError, AssertionError)):
        run_state_machine_as_test(WeakMachine, settings=settings(
            max_examples=200, stateful_step_count=30, deadline=None, derandomize=True, database=None,
            phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow]))
