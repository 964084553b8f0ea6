"""Readers: the spec's ``r``.  A registered sequence is a reader named by its id; a lease owner is a
reader too (``lookup(tokens, owner=seq_id)``); an ownerless lookup gets an anonymous reader that
lives as long as its leases.

::

    reader   name   seq      graph     block (pages, block order)   leases
    #0       "a"    active   idle      [7, 12, 31]                  {lease 4}
    #1       None   idle     idle      []                           {lease 5}     (anonymous)
    #2       "b"    idle     idle      []                           {lease 6}     (freed; its lease is held)

A reader is retired once its sequence is idle, its graph idle, and it holds no page and no lease;
its id may be reused.  Values it leaves behind (the generation a released lease recorded, the slots
an old capture recorded) are read by no guard without a new lease or capture, and go with it.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

import numpy as np

from .binding import BLOCK, GRAPH, LPIN, SEQ
from .errors import UnknownSequenceError
from .state import StateStore


class ReaderRecord:
    """Runtime bookkeeping of one reader (its spec state lives in the state store)."""

    __slots__ = ("rid", "name", "block", "leases", "slide_next", "session", "task")

    def __init__(self, rid: int, name: str | None) -> None:
        self.rid = rid
        self.name = name
        self.block: list[int] = []  # page ids of blocks 0..n-1 (block[r, p] == 'in', in depth order)
        self.leases: set[int] = set()  # ids of the live leases this reader holds
        self.slide_next = 0  # first block not yet proposed for ``slide``
        self.session: str | None = None
        self.task: str | None = None

    def __repr__(self) -> str:
        return f"reader '{self.name}'" if self.name is not None else f"anonymous reader #{self.rid}"


class ReaderTable:
    """Every live reader, by name and by id."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.by_name: dict[str, ReaderRecord] = {}
        self.by_rid: dict[int, ReaderRecord] = {}
        self.on_retire: list[Callable[[int], None]] = []
        self._active = store.cspec.codes[SEQ]["active"]
        self._idle_graph = store.cspec.codes[GRAPH]["idle"]
        self._step: tuple[list[str], StepReaders] | None = None  # the last decode step's names and readers

    def named(self, name: str) -> ReaderRecord:
        """The reader called ``name``, created (idle) if it does not exist."""
        rec = self.by_name.get(name)
        if rec is None:
            rec = self._new(name)
        return rec

    def anonymous(self) -> ReaderRecord:
        """A new reader with no name (an ownerless lookup's)."""
        return self._new(None)

    def _new(self, name: str | None) -> ReaderRecord:
        rec = ReaderRecord(self.store.alloc_reader(), name)
        self.by_rid[rec.rid] = rec
        if name is not None:
            self.by_name[name] = rec
            self._step = None
        return rec

    def active(self, rec: ReaderRecord) -> bool:
        """Whether the reader's sequence is registered (``seq[r] == 'active'``)."""
        return self.store.rcols[SEQ][rec.rid] == self._active  # (one array read)

    def sequence(self, name: object) -> ReaderRecord:
        """The reader of the live sequence ``name``; UnknownSequenceError otherwise."""
        rec = self.by_name.get(name) if isinstance(name, str) else None  # type: ignore[arg-type]
        if rec is None or not self.active(rec):
            raise UnknownSequenceError(f"no live sequence with id {name!r}")
        return rec

    def sequence_many(self, names: list[str]) -> list[ReaderRecord]:
        """``sequence`` of each of ``names`` (a decode step's): one pass over the names and one vector
        read of their states (the readers come back as a ``StepReaders``, their ids with them);
        UnknownSequenceError for the first that is not a live sequence.  The same names as the last
        step's (no name added or retired since) are the same readers: only their states are read."""
        last = self._step
        if last is not None and last[0] == names:
            if bool((self.store.rvecs[SEQ][last[1].rids] == self._active).all()):
                return last[1]
        recs = StepReaders(map(self.by_name.get, names))  # type: ignore[arg-type]  # None: no such name
        try:
            rids = np.fromiter(map(_RID, recs), dtype=np.int64, count=len(recs))
        except AttributeError:  # some name is no live sequence's
            rids = None
        if rids is not None and bool((self.store.rvecs[SEQ][rids] == self._active).all()):
            recs.rids = rids
            self._step = (names, recs)
            return recs
        return [self.sequence(name) for name in names]

    def sequences(self) -> list[ReaderRecord]:
        """Readers whose sequence is registered."""
        return [rec for rec in self.by_name.values() if self.active(rec)]

    def idle(self, rec: ReaderRecord) -> bool:
        """Nothing keeps the reader: sequence and graph idle, no page held, no lease."""
        store = self.store
        rid = rec.rid
        return (not self.active(rec) and store.rcols[GRAPH][rid] == self._idle_graph and not rec.leases
                and not rec.block and not store.has_rp(BLOCK, rid) and not store.has_rp(LPIN, rid))

    def retire_if_idle(self, rec: ReaderRecord) -> bool:
        """Retire the reader if nothing keeps it; True if it was retired."""
        if self.by_rid.get(rec.rid) is not rec or not self.idle(rec):
            return False
        del self.by_rid[rec.rid]
        if rec.name is not None and self.by_name.get(rec.name) is rec:
            del self.by_name[rec.name]
            self._step = None
        self.store.free_reader(rec.rid)
        for fn in self.on_retire:
            fn(rec.rid)
        return True

    def describe(self, rid: int | None) -> str:
        """How messages name a reader."""
        if rid is None:
            return "no reader"
        rec = self.by_rid.get(rid)
        return repr(rec) if rec is not None else f"reader #{rid}"


class StepReaders(list[ReaderRecord]):
    """The readers of a decode step, in order, with ``rids`` their ids as an int64 array (read once)."""

    rids: np.ndarray | None = None


_RID = attrgetter("rid")
