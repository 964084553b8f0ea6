"""Faults lose nothing: tier moves are transactional, pages an operation uses are never forgotten
under it, leftover files are counted and cleaned, integrity is exact while copies are in flight."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import digest, small_config, toks

from morphcache.runtime import (
    CacheManager,
    CapacityError,
    ConfigError,
    GuardRefused,
    MorphcacheError,
    NeedsRecovery,
    Ready,
    RuntimeConfig,
    TierError,
)
from morphcache.runtime import disktier as disktier_module
from morphcache.runtime import tiers as tiers_module
from morphcache.testing.diskdamage import records


def where(m: CacheManager) -> dict[int, str]:
    return {pid: m.page_state(pid)["tier"] for pid in m.page_ids()}


def test_spilling_a_parent_whose_last_child_is_the_disk_victim(make_manager: Callable[..., CacheManager]) -> None:
    """Page p0 is out of the pool but kept by its child p1 (pooled, on disk); p0 is on the host.
    Offloading another page needs p0 spilled, which needs p1 dropped: p0 loses its last child in the
    middle of its own spill.  It is held by the move, so the spill completes, and only afterwards is
    p0 forgotten (nothing holds it any more)."""
    m = make_manager(gpu_pages=8, host_pages=1, disk_pages=1, auto_admit=False)
    m.register("a", toks(0, 8))
    p0, p1 = m.sequence_pages("a")
    assert m.admit(p1)
    m.free("a")
    assert m.cached_pages() == (p1,) and m.page_state(p0)["pool"] == "private" and p0 in m.page_ids()
    m.offload(p0, "host")
    m.offload(p1, "disk")
    m.register("b", toks(100, 5))
    x = m.sequence_pages("b")[0]
    m.offload(x, "host")
    assert m.page_state(x)["tier"] == "host"
    assert p1 not in m.page_ids() and p0 not in m.page_ids()  # dropped for room, then nothing held p0
    m.check_integrity()


def test_a_page_being_offloaded_survives_the_drop_of_its_last_child(
        make_manager: Callable[..., CacheManager]) -> None:
    """No disk tier: offloading p0 needs the host's only page, its child p1, dropped.  p0 then has
    nothing holding it but the offload itself; the offload completes (it holds p0), and p0 is
    forgotten only after it."""
    m = make_manager(disk=False, gpu_pages=8, host_pages=1, auto_admit=False)
    m.register("a", toks(0, 8))
    p0, p1 = m.sequence_pages("a")
    assert m.admit(p1)
    m.offload(p1, "host")
    m.free("a")
    assert p0 in m.page_ids()  # kept by its child
    m.offload(p0, "host")
    assert p1 not in m.page_ids() and p0 not in m.page_ids()
    assert m.metrics().events_fired["offload_done"] == 2
    m.check_integrity()


def test_tiny_tiers_under_pressure_keep_integrity(make_manager: Callable[..., CacheManager]) -> None:
    """GPU 5 pages, host 2, disk 2, a pool of 2: every move makes room by spilling and dropping; each
    call either completes or raises the runtime's own error, and the state stays whole."""
    m = make_manager(gpu_pages=5, host_pages=2, disk_pages=2, pool_capacity=2)
    done = 0
    for i in range(10):
        try:
            m.register(f"s{i}", toks(100 * i, 9))
            for pid in m.sequence_pages(f"s{i}")[:2]:
                m.offload(pid, "disk" if i % 2 else "host")
            m.free(f"s{i}")
            done += 1
        except MorphcacheError:
            pass
        m.check_integrity()
        for pid in list(m.cached_pages())[:1]:
            try:
                m.prefetch(pid).result()
            except MorphcacheError:
                pass
            m.check_integrity()
    assert done >= 8 and m.metrics().bytes_moved.get("host->disk", 0) > 0


def test_prefetch_without_room_gives_its_slot_back(make_manager: Callable[..., CacheManager]) -> None:
    """No disk tier, every GPU page pinned: the prefetch is refused with CapacityError, no slot leaks,
    the page stays on the host."""
    m = make_manager(disk=False, gpu_pages=3, host_pages=4)
    m.register("a", toks(0, 4))
    m.free("a")
    (pid,) = m.cached_pages()
    m.offload(pid)
    m.register("b", toks(50, 9))  # 3 pages: the GPU is full
    lease = m.acquire("b")  # and every page of it pinned
    used = m.metrics().extra["gpu_pages_used"]
    with pytest.raises(CapacityError):
        m.prefetch(pid)
    assert m.metrics().extra["gpu_pages_used"] == used and m.page_state(pid)["tier"] == "host"
    m.check_integrity()
    m.release(lease)
    m.prefetch(pid).result()
    assert m.page_state(pid)["tier"] == "gpu"
    m.check_integrity()


def _failing_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record's bytes are written, its sync fails (the last step of a write)."""
    def fdatasync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(disktier_module.os, "fdatasync", fdatasync)


def test_failed_disk_write_leaves_the_page_where_it_was(make_manager: Callable[..., CacheManager],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    m = make_manager(disk_pages=2)
    m.register("a", toks(0, 16))
    m.free("a")
    pages = list(m.cached_pages())
    m.offload(pages[0], "disk")
    m.offload(pages[1], "disk")  # the disk is full now
    before = where(m)
    _failing_disk(monkeypatch)
    with pytest.raises(TierError, match="No space left"):
        m.offload(pages[2], "disk")
    assert where(m) == before  # nothing moved, nothing dropped to make room
    assert sorted(records(m.disk).values()) == sorted(pages[:2])  # the failed page's record cleared
    m.check_integrity()


def _host_and_disk_full(make_manager: Callable[..., CacheManager]) -> tuple[CacheManager, list[int]]:
    """One host and one disk page, both taken; a third cached page still on the GPU."""
    m = make_manager(host_pages=1, disk_pages=1)
    m.register("a", toks(0, 12))
    m.free("a")
    pages = list(m.cached_pages())
    m.offload(pages[0], "disk")
    m.offload(pages[1], "host")
    return m, pages


def test_failed_spill_drops_no_victim(make_manager: Callable[..., CacheManager],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Host and disk full; offloading one more page needs a host page spilled, which needs a disk page
    dropped.  The spill's write fails: the victim is not dropped, the page stays on the GPU."""
    m, pages = _host_and_disk_full(make_manager)
    before = digest(m)
    _failing_disk(monkeypatch)
    with pytest.raises(TierError):
        m.offload(pages[2], "host")
    after = digest(m)
    assert after["pages"] == before["pages"] and after["pooled"] == before["pooled"]
    m.check_integrity()


def test_undeletable_disk_file_is_a_counted_leftover_and_is_cleaned_later(
        make_manager: Callable[..., CacheManager], monkeypatch: pytest.MonkeyPatch) -> None:
    m = make_manager()
    m.register("a", toks(0, 8))
    m.free("a")
    pid = m.cached_pages()[0]
    m.offload(pid, "disk")
    slot = m.disk.pages[pid]
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if offset == slot * m.disk.stride and not bytes(data).startswith(disktier_module.MAGIC):
            raise PermissionError(13, "Read-only file system")  # the record cannot be cleared
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(disktier_module.os, "pwrite", pwrite)
    m.prefetch(pid).result()  # lands; its record cannot be cleared
    assert m.page_state(pid)["tier"] == "gpu" and records(m.disk) == {slot: pid}
    assert m.metrics().extra["disk_leftover_files"] == 1
    m.check_integrity()
    monkeypatch.setattr(disktier_module.os, "pwrite", real_pwrite)
    m.offload(m.cached_pages()[1], "host")  # the next move sweeps the leftovers
    assert records(m.disk) == {} and m.metrics().extra["disk_leftover_files"] == 0
    m.check_integrity()


@pytest.mark.parametrize("kwargs", [dict(disk_dir="", disk_pages=4), dict(disk_dir="/tmp/x", disk_pages=0)])
def test_a_disabled_disk_tier_must_be_said_with_none(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="disk"):
        RuntimeConfig(**kwargs)


def test_integrity_is_exact_while_a_copy_is_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = CacheManager(config=small_config(tmp_path))
    m.register("a", toks(0, 8))
    m.free("a")
    pid = m.cached_pages()[0]
    m.offload(pid, "host")
    started, go = threading.Event(), threading.Event()
    real_get = tiers_module.HostTier.get

    def slow_get(self: Any, page: int) -> Any:
        started.set()
        go.wait(10)
        return real_get(self, page)

    monkeypatch.setattr(tiers_module.HostTier, "get", slow_get)
    fut = m.prefetch(pid)
    assert started.wait(10)
    m.check_integrity()  # prefetching, slot reserved, host copy still there: all as it should be
    with pytest.raises(GuardRefused):
        m.drop(pid)  # a page whose copy is in flight stays
    go.set()
    fut.result()
    assert m.page_state(pid)["tier"] == "gpu"
    m.check_integrity()
    m.close()


def test_spill_into_an_unwritable_directory_drops_no_victim(make_manager: Callable[..., CacheManager],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The failed spill above with the file system refusing every write (read-only or unwritable),
    even the clearing of what it wrote: still no victim dropped, no record left but the disk page's,
    the page stays on the GPU."""
    m, pages = _host_and_disk_full(make_manager)
    before = digest(m)

    def pwrite(*args: Any) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(disktier_module.os, "pwrite", pwrite)
    with pytest.raises(TierError, match="Permission denied"):
        m.offload(pages[2], "host")
    after = digest(m)
    assert after["pages"] == before["pages"] and after["pooled"] == before["pooled"]
    assert sorted(os.listdir(m.disk.dir)) == [".lock", "pages.slab"]
    assert list(records(m.disk).values()) == [pages[0]]
    m.check_integrity()


def test_a_recovery_whose_copies_cannot_start_abandons_them(make_manager: Callable[..., CacheManager]) -> None:
    """A recovery that does not wait starts its copies once it let the lock go; when the workers cannot
    take them (they stopped), every queued copy is abandoned to the recompute path (no slot leaks,
    nothing left in flight) and the error is raised."""
    m = make_manager(gpu_pages=8, host_pages=8)
    res = _offloaded_prompt(m)
    used = m.metrics().extra["gpu_pages_used"]
    m.parts.prefetcher.executor.shutdown()
    with pytest.raises(RuntimeError):
        m.recover(res.plan, block=False)
    assert not m.parts.busy.inflight and m.metrics().extra["gpu_pages_used"] == used
    live = set(m.page_ids())
    assert all(pid not in live or m.page_state(pid)["tier"] == "dropped" for pid in res.plan.pages_on("prefetch"))
    assert m.metrics().events_fired["corrupt"] == len(res.plan.pages_on("prefetch"))  # to the recompute path
    m.check_integrity()


def test_a_recovery_hands_its_copies_to_the_workers_in_one_job_each(make_manager: Callable[..., CacheManager]) -> None:
    """A recovery that does not wait hands its queued copies to the worker pool as one job a worker
    (every ``workers``-th copy each, in queue order), not one a page; every copy lands and the payloads
    read back whole."""
    m = make_manager(gpu_pages=8, host_pages=8, prefetch_workers=2)
    res = _offloaded_prompt(m)
    assert len(res.plan.pages_on("prefetch")) >= 3
    pool = m.parts.prefetcher.executor
    jobs: list[Any] = []
    submit = pool.submit
    pool.submit = lambda fn, *args: jobs.append(args) or submit(fn, *args)  # type: ignore[method-assign]
    report = m.recover(res.plan, block=False)
    m.wait_prefetches()
    assert len(jobs) == 2 and sorted(pid for (job, _) in jobs for pid, _, _ in job) == \
        sorted(res.plan.pages_on("prefetch"))
    assert not report.failed and not m.parts.busy.inflight
    assert isinstance(m.lookup(toks(0, 12)), Ready)
    m.check_integrity()


def test_a_waited_recovery_copies_on_its_own_thread(make_manager: Callable[..., CacheManager]) -> None:
    """A recovery that waits for a few copies carries them out itself, each as a worker would: no job
    for the workers (they may even have stopped), every copy landed and nothing left in flight."""
    m = make_manager(gpu_pages=8, host_pages=8, prefetch_workers=2)
    res = _offloaded_prompt(m)
    m.parts.prefetcher.executor.shutdown()
    report = m.recover(res.plan)
    assert not report.failed and report.prefetched == len(res.plan.pages_on("prefetch"))
    assert not m.parts.busy.inflight and m.metrics().events_fired["land"] == report.prefetched
    assert isinstance(m.lookup(toks(0, 12)), Ready)
    m.check_integrity()


@pytest.mark.parametrize("block", [True, False])
def test_a_copy_that_cannot_be_written_goes_to_recompute(make_manager: Callable[..., CacheManager],
                                                         block: bool) -> None:
    """A copy whose write into its slot raises (the data plane failed) strands nothing: the page goes
    to the recompute path, counted ``unreadable``, its slot given back, nothing left in flight."""
    m = make_manager(gpu_pages=8, host_pages=8, prefetch_workers=2)
    res = _offloaded_prompt(m)
    used = m.metrics().extra["gpu_pages_used"]
    fetched = res.plan.pages_on("prefetch")

    def broken(slot: int, data: bytes) -> None:
        raise OSError("device write failed")

    m.parts.storage.data.write = broken  # type: ignore[method-assign]
    m.recover(res.plan, block=block)
    m.wait_prefetches()
    assert not m.parts.busy.inflight and m.metrics().extra["gpu_pages_used"] == used
    assert m.metrics().corrupt_pages == {"unreadable": len(fetched)}
    live = set(m.page_ids())
    assert all(pid not in live or m.page_state(pid)["tier"] == "dropped" for pid in fetched)
    m.check_integrity()


def test_a_waited_recovery_shares_many_copies_with_the_workers(make_manager: Callable[..., CacheManager]) -> None:
    """Past ``inline_copies`` copies a recovery that waits hands a share to each worker and copies one
    share itself, every ``shares``-th copy each in queue order."""
    m = make_manager(gpu_pages=8, host_pages=8, prefetch_workers=2)
    res = _offloaded_prompt(m)
    wanted = res.plan.pages_on("prefetch")
    assert len(wanted) >= 3
    prefetcher = m.parts.prefetcher
    prefetcher.inline_copies = 1
    threads: dict[int, int] = {}
    fetch = prefetcher.landing.fetch

    def tracked(pid: int, slot: int, source: str) -> int | None:
        threads[pid] = threading.get_ident()
        return fetch(pid, slot, source)

    prefetcher.landing.fetch = tracked  # type: ignore[method-assign]
    report = m.recover(res.plan)
    assert not report.failed and sorted(threads) == sorted(wanted)
    shares = min(3, len(wanted))  # one a worker and its own
    own = [pid for pid in wanted if threads[pid] == threading.get_ident()]
    assert own == list(wanted[::shares])  # the first share: the recovery's own, the rest the workers'
    assert not m.parts.busy.inflight and isinstance(m.lookup(toks(0, 12)), Ready)
    m.check_integrity()


def test_a_recoverys_queued_copies_share_one_future(make_manager: Callable[..., CacheManager],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The copies a recovery queues share one future (running from the start: it cannot be cancelled),
    done once the last of them has landed; each page is in flight until its own copy lands."""
    m = make_manager(gpu_pages=8, host_pages=8, prefetch_workers=2)
    res = _offloaded_prompt(m)
    wanted = res.plan.pages_on("prefetch")
    started, go = threading.Event(), threading.Event()
    real_get = tiers_module.HostTier.get

    def slow_get(self: Any, page: int) -> Any:
        if page == wanted[-1]:
            started.set()
            go.wait(10)
        return real_get(self, page)

    monkeypatch.setattr(tiers_module.HostTier, "get", slow_get)
    report = m.recover(res.plan, block=False)
    assert started.wait(10) and report.prefetched == len(wanted)
    futures = {id(f): f for f in m.parts.busy.inflight.values()}
    assert len(futures) == 1 and wanted[-1] in m.parts.busy.inflight
    (future,) = futures.values()
    assert not future.cancel() and not future.done()
    go.set()
    m.wait_prefetches()
    assert future.done() and future.result() is None and not m.parts.busy.inflight
    assert isinstance(m.lookup(toks(0, 12)), Ready)
    m.check_integrity()


def _offloaded_prompt(m: CacheManager) -> NeedsRecovery:
    """A 12-token prompt cached, every page offloaded to the host: its lookup needs prefetches."""
    m.register("a", toks(0, 12))
    m.free("a")
    for pid in m.cached_pages():
        m.offload(pid)
    res = m.lookup(toks(0, 12))
    assert isinstance(res, NeedsRecovery) and res.plan.pages_on("prefetch")
    return res
