"""Sequences: register, append (one sequence, or one token for many: a decode step), attach a leased
prefix, capture, free.  Each call is one transaction of spec events.

Token and page arithmetic (C = page size)::

    tokens     0 .......... C-1 | C ......... 2C-1 | 2C ..... frontier-1 |
    blocks     [    page 0     ][     page 1      ][  page 2 (filling)  ]
    append     open(r, p) at a page boundary, append(r, p) per token, seal(r, p) on its last token
    after      sealed pages are hashed into the index, then compressed, indexed, admitted and slid
               out of the window (proposals the spec decides)

Room is made before a transaction starts (a full GPU pool moves the policy's victims, never the
sequence's own pages); inside it only spec events and what undoes exactly with them happen, so a
refusal leaves everything as it was.  Bytes are written to the data plane once the events commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .binding import LPIN, POOL, TAIL
from .collect import Collector
from .config import RuntimeConfig
from .errors import BadInputError, CapacityError, DuplicateSequenceError, MorphcacheError
from .index import ROOT_HASH, PrefixIndex, chain_hash
from .lease import Lease
from .morphology import Morphology
from .pages import PageDirectory, PageRecord
from .pipeline import Pipeline
from .readers import ReaderRecord, ReaderTable
from .seam import PolicySeam
from .tiering import TierMover
from .tiers import Storage

Spans = Sequence[tuple[int, int, str]] | None
Pending = tuple[PageRecord, int, Sequence[int], list[str | None] | None]


def token_types(spans: Spans, n: int) -> list[str | None] | None:
    """The type of each of ``n`` tokens from ``(start, end, type_name)`` spans; BadInputError if malformed."""
    if spans is None:
        return None
    out: list[str | None] = [None] * n
    try:
        items = list(spans)
    except TypeError:
        raise BadInputError(f"types must be a sequence of (start, end, type_name) spans, got {spans!r}") from None
    for span in items:
        if not (isinstance(span, tuple) and len(span) == 3 and isinstance(span[2], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in span[:2])
                and 0 <= span[0] < span[1] <= n):
            raise BadInputError(f"a type span must be (start, end, type_name) with 0 <= start < end <= {n}, "
                                f"got {span!r}")
        for i in range(span[0], span[1]):
            out[i] = span[2]
    return out


class Sequences:
    """Writing sequences and their block tables."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, readers: ReaderTable, index: PrefixIndex,
                 storage: Storage, tiers: TierMover, morph: Morphology, collector: Collector, seam: PolicySeam,
                 config: RuntimeConfig) -> None:
        self.pipe, self.pages, self.readers, self.index, self.storage = pipe, pages, readers, index, storage
        self.tiers, self.morph, self.collector, self.seam, self.config = tiers, morph, collector, seam, config
        self.store = pipe.store
        self.C = config.page_size
        codes = pipe.cspec.codes
        self._sealed_codes = np.array([codes[TAIL]["sealed"], codes[TAIL]["released"]], dtype=np.int64)
        self._pooled = codes[POOL]["pooled"]
        self.page_bytes = config.page_bytes or storage.data.page_bytes

    def frontier(self, reader: ReaderRecord) -> int:
        """Tokens in the reader's sequence."""
        return self.store.reader("frontier", reader.rid)

    # -- register and free ------------------------------------------------------------------------
    def register(self, name: str, tokens: Sequence[int], types: Spans, session: str | None, task: str | None) -> int:
        """A new sequence (spec ``register``), then ``tokens`` appended; returns its frontier."""
        old = self.readers.by_name.get(name)
        if old is not None and self.readers.active(old):
            raise DuplicateSequenceError(f"sequence {name!r} is already registered")
        kinds = token_types(types, len(tokens))
        reader = self.readers.named(name)
        reader.session, reader.task = session, task
        def events(pending: list[Pending]) -> None:
            self.pipe.fire("register", reader.rid)
            self._events(reader, 0, tokens, kinds, pending)

        try:
            self._room(reader, 0, len(tokens))
            self._transaction(events)
        except BaseException:
            self.readers.retire_if_idle(reader)
            raise
        return self.frontier(reader)

    def free(self, reader: ReaderRecord) -> None:
        """End the sequence: every page leaves its block table (``detach``), then ``free``; its sealed
        pages are proposed for the pool and what nothing holds is forgotten.  Its leases stay."""
        block = list(reader.block)
        pids = np.asarray(block, dtype=np.int64)

        def events(pending: list[Pending]) -> None:
            if block:
                self.pipe.fire_batch("detach", reader.rid, pids, distinct=True)
            self.pipe.fire("free", reader.rid)

        self._transaction(events)
        reader.block = []
        reader.slide_next = 0
        records = self.pages.records
        self.seam.holders(block, -1)
        if self.config.auto_admit and block:
            store = self.store
            sealed = np.isin(store.vecs[TAIL][pids], self._sealed_codes) & (store.vecs[POOL][pids] != self._pooled)
            for pid in pids[sealed].tolist():
                if pid in records:
                    self.morph.admit(pid)
        if block:
            self.collector.collect_many(pids[::-1])
        self.readers.retire_if_idle(reader)

    # -- append -----------------------------------------------------------------------------------
    def append(self, reader: ReaderRecord, tokens: Sequence[int], types: Spans = None) -> int:
        """Write ``tokens`` at the frontier; all of them or none.  Returns the new frontier."""
        kinds = token_types(types, len(tokens))
        start = self.frontier(reader)
        if start + len(tokens) > self.config.max_sequence_tokens:
            raise BadInputError(f"sequence {reader.name!r}: {start} + {len(tokens)} tokens exceeds "
                                f"max_sequence_tokens {self.config.max_sequence_tokens}")
        self._room(reader, start, len(tokens))
        self._transaction(lambda pending: self._events(reader, start, tokens, kinds, pending))
        return self.frontier(reader)

    def append_many(self, items: list[tuple[ReaderRecord, Sequence[int]]]) -> list[MorphcacheError]:
        """One token (or more) for each of many sequences: a decode step.  Single tokens that neither
        open nor seal a page fire as one vector batch of ``append`` and are written to the data plane
        in one call; the rest go one by one.  Returns the refusals (each sequence on its own)."""
        simple_r: list[int] = []
        simple_p: list[int] = []
        simple_t: list[int] = []
        simple_rec: list[PageRecord] = []
        rest: list[tuple[ReaderRecord, Sequence[int]]] = []
        records, last = self.pages.records, self.C - 1
        limit = self.config.max_sequence_tokens
        frontier = self.store.rcols["frontier"]
        for reader, toks in items:
            block = reader.block
            if len(toks) == 1 and block:
                rec = records[block[-1]]
                if len(rec.tokens) < last and frontier[reader.rid] < limit:
                    simple_r.append(reader.rid)
                    simple_p.append(rec.pid)
                    simple_t.append(toks[0])
                    simple_rec.append(rec)
                    continue
            rest.append((reader, toks))
        errors: list[MorphcacheError] = []
        if simple_r:
            n = len(simple_r)
            pids = np.fromiter(simple_p, dtype=np.int64, count=n)
            fired = self.pipe.fire_batch("append", np.fromiter(simple_r, dtype=np.int64, count=n), pids, atomic=False)
            ok = fired.tolist()
            if all(ok):
                recs, toks_ = simple_rec, simple_t
            else:
                recs = [rec for rec, f in zip(simple_rec, ok, strict=True) if f]
                toks_ = [t for t, f in zip(simple_t, ok, strict=True) if f]
                readers = self.readers.by_rid
                rest += [(readers[r], [t]) for r, t, f in zip(simple_r, simple_t, ok, strict=True) if not f]
            self._write_one_each(recs, toks_)
        for reader, toks in rest:
            try:
                self.append(reader, toks)
            except MorphcacheError as exc:
                errors.append(exc)
        return errors

    def _write_one_each(self, recs: list[PageRecord], tokens: list[int]) -> None:
        """Each page of ``recs`` takes one more token: records and the data plane (in one call when the
        store can)."""
        offsets = [len(rec.tokens) for rec in recs]
        for rec, token in zip(recs, tokens, strict=True):
            rec.tokens.append(token)
        many = getattr(self.storage.data, "write_tokens_many", None)
        if many is not None and len(recs) > 4:
            n = len(recs)
            many(np.fromiter((rec.gpu_slot for rec in recs), dtype=np.int64, count=n),
                 np.fromiter((rec.meta.depth for rec in recs), dtype=np.int64, count=n),
                 np.fromiter(offsets, dtype=np.int64, count=n), np.fromiter(tokens, dtype=np.uint64, count=n))
            return
        write = self.storage.data.write_tokens
        for rec, offset, token in zip(recs, offsets, tokens, strict=True):
            write(rec.gpu_slot, rec.depth, offset, (token,))

    def _room(self, reader: ReaderRecord, start: int, n: int) -> None:
        """Free GPU slots for every page ``n`` tokens from ``start`` open (never the reader's own pages)."""
        need = len(range(-(-start // self.C) * self.C, start + n, self.C)) if n else 0
        slots = self.storage.slots
        protect = set(reader.block)
        while len(slots.free_slots) < need:
            if not self.tiers.reclaim_gpu(protect):
                raise CapacityError(
                    f"GPU pool full: none of its {slots.slots} pages can be offloaded or dropped "
                    "(pinned, being written, captured, in flight or protected)")

    def _transaction(self, events: Callable[[list[Pending]], Any]) -> None:
        """Run ``events`` in one transaction; on success write the bytes and process sealed pages."""
        pipe = self.pipe
        pending: list[Pending] = []
        undo: list[Callable[[], None]] = []
        self._undo = undo
        sp = pipe.begin()
        try:
            events(pending)
        except BaseException:
            pipe.rollback(sp)
            for fn in reversed(undo):
                fn()
            raise
        pipe.commit()
        self._written(pending)

    def _events(self, reader: ReaderRecord, start: int, tokens: Sequence[int], kinds: list[str | None] | None,
                pending: list[Pending]) -> None:
        """Fire open/append/seal for ``tokens`` written at ``start`` (inside a transaction)."""
        c, pipe, rid = self.C, self.pipe, reader.rid
        i, n, pos = 0, len(tokens), start
        while i < n:
            if pos % c == 0:
                self._open(reader)
            pid = reader.block[-1]
            fill = pos % c
            take = min(c - fill, n - i)
            seals = fill + take == c
            appends = take - seals
            if appends > 2:
                pipe.fire_repeat("append", rid, pid, appends)
            else:
                for _ in range(appends):
                    pipe.fire("append", rid, pid)
            if seals:
                pipe.fire("seal", rid, pid)
            rec = self.pages.records[pid]
            chunk = tokens[i:i + take]
            if fill + take == c:  # sealed: the chain hash the next page's open needs
                rec.hash = chain_hash(rec.parent_hash, list(rec.tokens) + list(chunk))
                self._undo.append(_setter(rec, "hash", None))
                if self.config.auto_slide:  # windows W tokens behind the frontier the seal reached
                    self._undo.append(_setter(reader, "slide_next", reader.slide_next))
                    self.morph.auto_slide(reader)
            pending.append((rec, fill, chunk, kinds[i:i + take] if kinds else None))
            i += take
            pos += take

    def _open(self, reader: ReaderRecord) -> int:
        """Take a fresh page id and GPU slot for the reader's next block and fire ``open``."""
        block = reader.block
        parent = block[-1] if block else -1
        parent_hash = self.pages.records[parent].hash if parent >= 0 else ROOT_HASH
        assert parent_hash is not None, "a page is opened only after its predecessor is sealed"
        pid = self.store.alloc_page()
        meta = self.pages.meta(pid, len(block), session=reader.session, task=reader.task, bytes=self.page_bytes)
        rec = PageRecord(pid, parent, parent_hash, meta)
        self.pages.add(rec)
        self._undo.append(lambda: _none(self.pages.remove(pid)))
        self.storage.place(rec, self.storage.slots.take(pid), 0)
        self._undo.append(lambda: self.storage.free_slot(rec))
        self.pipe.fire("open", reader.rid, pid)
        block.append(pid)
        self._undo.append(lambda: _none(block.pop()))
        self.index.add_child(parent_hash, pid, rec.tokens)
        self._undo.append(lambda: self.index.remove_child(parent_hash, pid))
        return pid

    def _written(self, pending: list[Pending]) -> None:
        """After commit: bytes to the data plane, tokens to the records, sealed pages processed."""
        write = self.storage.data.write_tokens
        fresh = [rec for rec, fill, _, _ in pending if fill == 0 and not rec.tokens]
        for rec in fresh:
            self.seam.inserted(rec)
        self.seam.holders([rec.pid for rec in fresh], 1)
        self.seam.tick()
        for rec, fill, toks, kinds in pending:
            write(rec.gpu_slot, rec.depth, fill, toks)
            rec.tokens.extend(toks)
            meta = rec.meta
            meta.tokens = len(rec.tokens)
            if kinds is not None and any(kinds):
                meta.types = meta.types | {k for k in kinds if k}
            self.seam.accessed([rec.pid])
            if len(rec.tokens) == self.C:
                self._sealed(rec)

    def _sealed(self, rec: PageRecord) -> None:
        assert rec.hash is not None
        rec.meta.hash = rec.hash
        rec.meta.recovery_tokens = self.C * (rec.depth + 1)
        self.index.add_sealed(rec.hash, rec.pid)
        self.seam.updated(rec)
        if self.config.auto_compress:
            self.morph.maintain(rec.pid)
        elif self.config.auto_admit:
            self.morph.admit(rec.pid)

    # -- attach -----------------------------------------------------------------------------------
    def attach(self, reader: ReaderRecord, lease: Lease) -> int:
        """Start an empty sequence with a leased prefix: its whole pages join the block table (spec
        ``attach``, the reader pinning them for the moment if the lease is another reader's), the
        partial page is copied into a fresh page of the sequence.  The lease stays held."""
        if reader.block:
            raise BadInputError(f"attach needs an empty sequence; {reader.name!r} has "
                                f"{self.frontier(reader)} tokens")
        part = lease.partial
        extra = len(part.tokens) if part is not None and part.tokens else 0
        self._room(reader, len(lease.pages) * self.C, extra)
        full = np.asarray(lease.pages, dtype=np.int64)
        own = lease.reader == reader.rid
        pipe, rid = self.pipe, reader.rid

        def events(pending: list[Pending]) -> None:
            if len(full):
                if not own:
                    pipe.fire_batch("acquire", rid, full, distinct=True)
                pipe.fire_batch("attach", rid, full, distinct=True)
                if not own:
                    counts = [self.store.rp_value(LPIN, rid, pid) for pid in lease.pages]
                    more = full[[c > 1 for c in counts]]
                    last = full[[c <= 1 for c in counts]]
                    if len(more):
                        pipe.fire_batch("release", rid, more)
                    if len(last):
                        pipe.fire_batch("release_last", rid, last)
                reader.block.extend(lease.pages)
                self._undo.append(lambda: reader.block.clear())
            if extra:
                self._events(reader, len(lease.pages) * self.C, part.tokens, None, pending)  # type: ignore[union-attr]

        self._transaction(events)
        self.seam.holders(lease.pages, 1)
        if extra:
            rec = self.pages.get(reader.block[-1])
            self.storage.data.write_prefix(rec.gpu_slot, extra, part.payload)  # type: ignore[union-attr]
        return self.frontier(reader)

    # -- graph capture ----------------------------------------------------------------------------
    def graph(self, event: str, readers: list[ReaderRecord]) -> None:
        """Fire ``capture`` or ``uncapture`` for every reader of a batch, all or none."""
        def events(pending: list[Pending]) -> None:
            for reader in readers:
                self.pipe.fire(event, reader.rid)

        self._transaction(events)

    def slide(self, reader: ReaderRecord) -> int:
        """Propose ``slide`` for every live window of the sequence; how many slid."""
        return self.morph.slide(reader)


def _setter(obj: object, name: str, value: object) -> Callable[[], None]:
    return lambda: setattr(obj, name, value)


def _none(_: object) -> None:
    return None
