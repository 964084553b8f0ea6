"""The lease book: acquiring, re-validating and releasing leases, each a batch of spec events.

::

    acquire   acquire(r, p) on every whole page (one vector batch) + acquire_tail(r, tail)
    read      read(r, p) on every pinned page: the spec's guard is the one comparison (pin, leased
              generation == current generation, readable or the reader's own tail, window)
    release   release(r, p) where the reader holds more than one lease on p, release_last elsewhere;
              then pages nothing holds are collected and an idle reader retired

Each call is all or nothing (one transaction).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .binding import GEN, LPIN
from .collect import Collector
from .errors import BadInputError, ForeignLeaseError, GuardRefused, LeaseReleasedError, StaleLeaseError
from .lease import Lease, PartialSnapshot, ReadView
from .pages import PageDirectory
from .pipeline import Pipeline, vector_from
from .readers import ReaderRecord, ReaderTable
from .seam import PolicySeam
from .sparse import frozen
from .tiers import Storage

_MAX = np.maximum.reduce  # (the ufunc's reduction: no Python wrapper)


class LeaseBook:
    """Every live lease of one manager."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, readers: ReaderTable, storage: Storage,
                 collector: Collector, seam: PolicySeam, ident: int) -> None:
        self.pipe, self.pages, self.readers, self.storage = pipe, pages, readers, storage
        self.collector, self.seam, self.ident = collector, seam, ident
        self.store = pipe.store
        self.leases: dict[int, Lease] = {}

    def __len__(self) -> int:
        return len(self.leases)

    def acquire(self, reader: ReaderRecord, full: Sequence[int] | np.ndarray, tokens: int,
                partial: PartialSnapshot | None = None, tail: int | None = None) -> Lease:
        """Pin the whole pages ``full`` (ids, block order; and the reader's own ``tail``) for
        ``reader``; the spec's refusal otherwise."""
        ids = frozen(full)  # one read-only copy: the lease's rows and the Lease share it
        if tail is None and len(ids) == 1:  # one page (most leases): one firing
            self.pipe.firer("acquire")(reader.rid, int(ids[0]), None, None)
        else:
            self._fire(reader.rid, ("acquire", ids), None, tail)
        gens = self.store.vecs[GEN][ids]
        gens.flags.writeable = False  # a fresh array, now the Lease's own
        tail_gen = self.store.page(GEN, tail) if tail is not None else None
        lease = Lease(self.ident, reader.name, reader.rid, ids, gens, tokens, partial, tail, tail_gen)
        self.leases[lease.lease_id] = lease
        reader.leases.add(lease.lease_id)
        return lease

    def own(self, lease: object) -> Lease:
        """``lease`` if it is a live lease of this manager; the matching LeaseError otherwise."""
        if not isinstance(lease, Lease):
            raise BadInputError(f"expected a Lease, got {type(lease).__name__}")
        if lease.issuer != self.ident or self.leases.get(lease.lease_id) is not lease:
            if lease.issuer == self.ident and lease.released:
                raise LeaseReleasedError(f"lease #{lease.lease_id} was already released")
            raise ForeignLeaseError(f"lease #{lease.lease_id} was not issued by this manager")
        if lease.released:
            raise LeaseReleasedError(f"lease #{lease.lease_id} was already released")
        return lease

    def validate(self, lease: Lease, payloads: bool = False) -> ReadView:
        """Spec ``read`` on every pinned page now (``Pipeline.recheck``: decided again only when state
        changed since it last passed); StaleLeaseError naming the first page refused."""
        pinned = lease.pinned
        if pinned:
            try:  # (not fired again while nothing that changes state has fired since it last passed)
                lease.passed = self.pipe.recheck("read", lease.reader, lease.pinned_ids, lease.passed)
            except GuardRefused as exc:
                raise StaleLeaseError(f"lease #{lease.lease_id}: page {exc.page} failed re-validation: {exc}") from exc
        records = self.pages.records
        slots = tuple(records[pid].gpu_slot for pid in pinned)
        gens = lease.generations + ((lease.tail_generation,) if lease.tail_generation is not None else ())
        data = tuple(self.storage.data.read(s) for s in slots) if payloads else None
        self.seam.tick()
        self.seam.accessed(lease.pinned_ids)
        return ReadView(lease.lease_id, slots, gens, data)  # type: ignore[arg-type]

    def release(self, lease: Lease) -> None:
        """Unpin every page of the lease; collect what nothing holds any more."""
        pinned = lease.pinned_ids
        pid = int(pinned[0]) if len(pinned) == 1 else -1
        if pid >= 0:  # one page (most leases): one scalar read, one firing
            self.pipe.firer("release" if self.store.varrays[LPIN][(lease.reader, pid)] > 1 else "release_last")(
                lease.reader, pid, None, None)
        else:
            counts = self.store.varrays[LPIN][(lease.reader, pinned)]
            if len(counts) and _MAX(counts) <= 1:  # the reader's only lease on every page (the common case)
                self._fire(lease.reader, ("release_last", pinned))
            else:
                self._fire(lease.reader, ("release", pinned[counts > 1]), ("release_last", pinned[counts <= 1]))
        lease.released = True
        del self.leases[lease.lease_id]
        reader = self.readers.by_rid.get(lease.reader)
        if reader is not None:
            reader.leases.discard(lease.lease_id)
        self.collector.collect_many([pid] if pid >= 0 else pinned[::-1])
        if reader is not None:
            self.readers.retire_if_idle(reader)

    def _fire(self, rid: int, first: tuple[str, np.ndarray], then: tuple[str, np.ndarray] | None = None,
              tail: int | None = None) -> None:
        """Fire event ``first[0]`` for reader ``rid`` on every page of ``first[1]`` (distinct), then
        ``then``'s likewise, then ``acquire_tail`` on ``tail``: all or nothing, in that order, as
        ``fire_batch`` fires each batch (``Pipeline.fire_within`` inside one transaction) and ``fire`` the
        tail.
        One firing alone needs no transaction (it is all or nothing on its own)."""
        pipe = self.pipe
        work = [batch for batch in ((first,) if then is None else (first, then)) if len(batch[1])]
        if not work:  # the tail alone (or nothing)
            if tail is not None:
                pipe.firer("acquire_tail")(rid, tail, None, None)
            return
        name, ids = work[0]
        if tail is None and len(work) == 1 and (len(ids) == 1 or len(ids) >= vector_from(name)):
            pipe.fire_batch(name, rid, ids, distinct=True)  # (all or nothing on its own: no transaction here)
            return
        savepoint = pipe.begin()
        try:
            for name, ids in work:
                pipe.fire_within(name, rid, ids)
            if tail is not None:
                pipe.firer("acquire_tail")(rid, tail, None, None)
        except BaseException:
            pipe.rollback(savepoint)
            raise
        pipe.commit()

    def rows(self, leases: list[Lease], page_size: int) -> tuple[list[list[int]], list[list[int]], list[int]]:
        """Block-table rows (GPU slots), generation rows and lengths of ``leases`` for a kernel lease."""
        slots: list[list[int]] = []
        gens: list[list[int]] = []
        lens: list[int] = []
        for lease in leases:
            slots.append([self.pages.get(pid).gpu_slot for pid in lease.pinned])
            tail = [lease.tail_generation] if lease.tail_generation is not None else []
            gens.append(lease.generation_ids.tolist() + tail)
            lens.append(lease.tokens if lease.tail is not None else len(lease.page_ids) * page_size)
        return slots, gens, lens
