"""Landing a prefetch's copy: the bytes copied into the reserved slot (outside the lock), then the spec
deciding, under the lock, whether the page lands::

    fetch      source (host or disk) --read--> bytes --write--> reserved GPU slot     (no lock)
    land       copy_done -> verify (the checksum measured: ``intact`` observed) -> land | corrupt
               the page out of flight and collected
    then       the job's source copies deleted (a disk record that cannot be cleared is a counted
               leftover; adjacent records cleared by one write)

A job's copies are fetched first, then landed one after the other under one hold of the lock (a
copy whose landing raises strands no other: the first error is returned).  Each event is one
generated plan (about a microsecond); a vector batch of them costs some 50 us, more than the few
dozen copies a recovery lands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .collect import Busy, Collector
from .metrics import Metrics
from .pages import PageDirectory, PageRecord
from .pipeline import Pipeline
from .seam import PolicySeam
from .store import checksum
from .tiers import Storage

Copy = tuple[int, int, str]  # a queued copy: page, reserved slot, source tier
FAILED = -1  # ``fetch``'s length of a copy whose reading or writing raised
_LANDED = {"host": "host->gpu", "disk": "disk->gpu"}  # the bytes a landed copy moved, by its source
_INTACT, _BROKEN = {"intact": True}, {"intact": False}  # what ``verify`` measured (read, never written)
Plans = tuple[Callable[[Any, Any, Any, Any], None], Callable[[Any, Any, Any, Any], None], Callable[[Any, Any], bool]]


class Landing:
    """Copies a prefetched page's bytes into its slot and lets the spec decide whether it lands."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, storage: Storage, seam: PolicySeam, busy: Busy,
                 collector: Collector, metrics: Metrics, page_bytes: int) -> None:
        self.pipe, self.pages, self.storage, self.seam, self.busy = pipe, pages, storage, seam, busy
        self.collector, self.metrics, self.page_bytes = collector, metrics, page_bytes
        self.batched = True  # a recovery's job tells the policy its landed pages' moves together

    def fetch(self, pid: int, slot: int, source: str) -> int | None:
        """Copy the page's payload from ``source`` into ``slot`` (call without the lock): its length,
        None if the source holds none, ``FAILED`` if reading or writing it raised."""
        storage = self.storage
        try:
            data = storage.host.get(pid) if source == "host" else (storage.disk.get(pid) if storage.disk else None)
            if data is None:
                return None
            storage.data.write(slot, data)
        except Exception:  # noqa: BLE001 - a copy that cannot be read or written never strands its page
            return FAILED
        return len(data)

    def fetch_all(self, job: list[Copy]) -> list[int | None]:
        """``fetch`` of each copy of ``job`` in order (call without the lock, or holding it for a job no
        other thread waits for)."""
        fetch = self.fetch
        return [fetch(pid, slot, source) for pid, slot, source in job]

    def land_all(self, job: list[Copy], lengths: list[int | None]) -> BaseException | None:
        """(lock held) Each copy of ``job`` landed (``lengths``: ``fetch``'s answers), its page then out
        of flight and collected, in order; then the source copies of those landed (or refused) deleted
        together, the disk records of adjacent slots by one write (a page forgotten meanwhile had its
        copies deleted with it).  The first error returned (every other copy landed)."""
        error: BaseException | None = None
        inflight, collect, done = self.busy.inflight, self.collector.collect, []
        held = self.busy.held
        pipe = self.pipe
        plans = pipe.firer("copy_done"), pipe.firer("verify"), pipe.proposer("land")
        land = self.land
        if self.batched and len(job) > 1 and all(pid in held for pid, _, _ in job):  # (nothing forgotten here)
            moves: list[PageRecord] = []  # the landed pages' moves, told together (before any other notice)
            for (pid, slot, source), length in zip(job, lengths, strict=True):
                try:
                    land(pid, slot, source, length, moves, plans)
                    done.append(pid)
                except BaseException as exc:  # noqa: BLE001 - the copy's outcome, on its future
                    error = error or exc
            self._moved(moves)
            records, deferred = self.pages.records, self.busy.deferred
            for pid, _, _ in job:  # held: what ``collect`` does to a held page, collected when the hold ends
                inflight.pop(pid, None)
                if pid in records:
                    deferred.add(pid)
        else:
            for (pid, slot, source), length in zip(job, lengths, strict=True):
                try:
                    try:
                        land(pid, slot, source, length, None, plans)
                        done.append(pid)
                    finally:
                        inflight.pop(pid, None)
                        collect(pid)
                except BaseException as exc:  # noqa: BLE001 - the copy's outcome, on its future
                    error = error or exc
        storage = self.storage
        storage.host.remove_many(done)
        disk = storage.disk
        if disk is not None:
            left = len(disk.leftovers)
            disk.remove_many(done)
            if len(disk.leftovers) != left:  # a record that could not be cleared
                self.metrics.extra["disk_leftover_files"] = len(disk.leftovers)
        return error

    def _verdict(self, rec: PageRecord, slot: int, length: int | None) -> str | None:
        """Why the copy of ``length`` bytes in ``slot`` is not the page's (None: it is)."""
        if length == FAILED:
            return "unreadable"
        if length is None:
            return "missing"
        if length != self.page_bytes:
            return "truncated"
        if checksum(self.storage.data.read(slot)) != rec.checksum:
            return "checksum"
        return None

    def land(self, pid: int, slot: int, source: str, length: int | None,
             moves: list[PageRecord] | None = None, plans: Plans | None = None) -> None:
        """The spec decides whether the copy lands (``length``: ``fetch``'s answer; ``FAILED``: reading
        or writing it raised, so the page goes to the recompute path, counted ``unreadable``); the
        page's slot freed if it does not, the policy told (the source copy is left to the caller).
        ``moves``: a landed page's move is appended there, for the caller to tell with the others (the
        moves kept there told first when a page does not land: its ``corrupt`` tells the policy).
        ``plans``: the pipeline's ``firer`` of copy_done and verify and ``proposer`` of land (the caller
        landing many copies fetches them once)."""
        pipe, storage = self.pipe, self.storage
        rec = self.pages.get(pid)
        copy_done, verify, land = plans or (pipe.firer("copy_done"), pipe.firer("verify"), pipe.proposer("land"))
        copy_done(None, pid, None, None)
        reason = self._verdict(rec, slot, length)
        verify(None, pid, None, _INTACT if reason is None else _BROKEN)
        if land(None, pid):  # the spec decides, from what verify recorded
            self.metrics.bytes_moved[_LANDED[source]] += length or 0
            if moves is None:
                self.seam.moved(rec, "gpu")
            else:
                moves.append(rec)
            return
        if moves:
            self._moved(moves)
        pipe.fire("corrupt", None, pid)
        self.metrics.corrupt_pages[reason or "refused"] += 1
        storage.free_slot(rec)
        self.seam.moved(rec, "dropped")

    def _moved(self, moves: list[PageRecord]) -> None:
        """Tell the policy the pages of ``moves`` landed on the GPU, in order (then forget them)."""
        if moves:
            self.seam.moved_many(moves, ["gpu"] * len(moves))
            moves.clear()
