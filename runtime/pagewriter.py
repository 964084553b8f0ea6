"""Writing pages, inside one transaction of spec events: what register, append and attach share.

Token and page arithmetic (C = page size)::

    tokens     0 .......... C-1 | C ......... 2C-1 | 2C ..... frontier-1 |
    blocks     [    page 0     ][     page 1      ][  page 2 (filling)  ]
    events     open(r, p) at a page boundary, append(r, p) per token (one repeat batch for a run),
               seal(r, p) on a page's last token, in page order (an open needs the frontier the
               previous seal reached); after the write's last seal, slide proposals for the windows
               left behind (one batch when many)
    after      in bulk over the pages written: the bytes to the data plane (one call), the policy
               told (one tick), the records; the sealed pages hashed into the index, compressed,
               indexed and admitted (proposals the spec decides, batches over them)

Room is made before a transaction starts (a full GPU pool moves the policy's victims, never the
sequence's own pages); inside it only spec events and what undoes exactly with them happen (an
undo action is registered for each), so a refusal leaves everything as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from .config import RuntimeConfig
from .errors import BadInputError
from .index import ROOT_HASH, PrefixIndex, chain_hash
from .morphology import Morphology
from .pages import PageDirectory, PageRecord
from .pipeline import Pipeline
from .readers import ReaderRecord, ReaderTable
from .seam import PolicySeam
from .tiering import TierMover
from .tiers import Storage
from .tips import Tips

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


class PageWriter:
    """Opens, fills and seals pages for a reader, one transaction at a time."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, readers: ReaderTable, index: PrefixIndex,
                 storage: Storage, tiers: TierMover, morph: Morphology, seam: PolicySeam,
                 config: RuntimeConfig) -> None:
        self.pipe, self.pages, self.readers, self.index, self.storage = pipe, pages, readers, index, storage
        self.tiers, self.morph, self.seam, self.config = tiers, morph, seam, config
        self.store = pipe.store
        self.C = config.page_size
        self.page_bytes = config.page_bytes or storage.data.page_bytes
        self._undo: list[Callable[[], None]] = []
        self.tips = Tips()  # the page each reader is writing (tips.py), kept wherever a block table changes

    def undo(self, fn: Callable[[], Any]) -> None:
        """Register what undoes a change made outside the state store in the current transaction."""
        self._undo.append(fn)

    def room(self, reader: ReaderRecord, start: int, n: int) -> None:
        """Free GPU slots for every page ``n`` tokens from ``start`` open (never the reader's own pages)."""
        need = len(range(-(-start // self.C) * self.C, start + n, self.C)) if n else 0
        if len(self.storage.slots.free_slots) < need:
            self.tiers.make_room(need, set(reader.block))

    def transaction(self, events: Callable[[list[Pending]], Any],
                    after: Callable[[list[Pending]], Any] | None = None) -> None:
        """Run ``events`` in one transaction; on success write the bytes and process sealed pages (``after``
        in place of ``written`` when given)."""
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
        (after or self.written)(pending)

    def events(self, reader: ReaderRecord, start: int, tokens: Sequence[int], kinds: list[str | None] | None,
                pending: list[Pending]) -> None:
        """Fire open/append/seal for ``tokens`` written at ``start`` (inside a transaction)."""
        c, pipe, rid = self.C, self.pipe, reader.rid
        i, n, pos = 0, len(tokens), start
        last_seal = (start + n) // c * c  # the frontier the write's last seal reaches
        slide = self.config.auto_slide and last_seal > start
        if slide:
            self.undo(_setter(reader, "slide_next", reader.slide_next))
        while i < n:
            if pos % c == 0:
                self.open(reader)
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
                self.seal_hash(rec, chunk)
                if slide and pos + take == last_seal:  # windows W tokens behind the frontier it reached
                    self.morph.auto_slide(reader)
            pending.append((rec, fill, chunk, kinds[i:i + take] if kinds else None))
            i += take
            pos += take

    def seal_hash(self, rec: PageRecord, chunk: Sequence[int]) -> None:
        """Set the chain hash of ``rec``, sealed by its last tokens ``chunk`` (inside a transaction)."""
        rec.hash = chain_hash(rec.parent_hash, list(rec.token_ids) + list(chunk))
        self.undo(_setter(rec, "hash", None))

    def open(self, reader: ReaderRecord) -> int:
        """Take a fresh page id and GPU slot for the reader's next block and fire ``open``."""
        rec = self.fresh(reader)
        self.pipe.fire("open", reader.rid, rec.pid)
        self.link(reader, rec)
        return rec.pid

    def fresh(self, reader: ReaderRecord) -> PageRecord:
        """A fresh page id, its record and a GPU slot for the reader's next block (inside a transaction)."""
        block = reader.block
        parent = block[-1] if block else -1
        parent_hash = self.pages.records[parent].hash if parent >= 0 else ROOT_HASH
        assert parent_hash is not None, "a page is opened only after its predecessor is sealed"
        pid = self.store.alloc_page()
        rec = self.pages.record(pid, parent, parent_hash, len(block), session=reader.session, task=reader.task,
                                writer=reader.name, bytes=self.page_bytes)
        self.pages.add(rec)
        self.undo(lambda: _none(self.pages.remove(pid)))
        self.storage.place(rec, self.storage.slots.take(pid), 0)
        self.undo(lambda: self.storage.free_slot(rec))
        return rec

    def link(self, reader: ReaderRecord, rec: PageRecord) -> None:
        """The opened page ends the reader's block table (and its tip) and continues its parent in the
        index."""
        block, pid, parent_hash = reader.block, rec.pid, rec.parent_hash
        block.append(pid)
        self.tips.point(reader.rid, rec)
        self.undo(lambda: self._unlink(reader.rid, block))
        self.index.add_child(parent_hash, pid, rec.token_ids, rec.parent)
        self.undo(lambda: self.index.remove_child(parent_hash, pid))

    def _unlink(self, rid: int, block: list[int]) -> None:
        """Undo of ``link``: the page leaves the end of the block table, the tip goes back to the page
        before it (one closure a page: nothing else kept until the commit, whose garbage would scatter
        the next request's token ints)."""
        block.pop()
        self.tips.point(rid, self.pages.records[block[-1]] if block else None)

    def written(self, pending: list[Pending]) -> None:
        """After commit, for every page the transaction wrote, in bulk: the policy told of the fresh ones
        and of every write (one tick), the bytes to the data plane, the tokens to the records, then the
        pages it sealed hashed into the index and their morphology proposed (``sealed_many``)."""
        seam, c = self.seam, self.C
        fresh = [rec for rec, fill, _, _ in pending if fill == 0 and not rec.token_ids]
        for rec in fresh:
            seam.inserted(rec)
        seam.holders(list(map(_PID, fresh)), 1)
        seam.tick()
        self.write_data(pending)
        sealed: list[PageRecord] = []
        for rec, _, toks, kinds in pending:
            meta = rec.meta
            meta.tokens = rec.extend(toks)
            if kinds is not None and any(kinds):
                meta.types = meta.types | {k for k in kinds if k}
            if meta.tokens == c:
                sealed.append(rec)
        seam.accessed(list(dict.fromkeys(rec.pid for rec, _, _, _ in pending)))
        if sealed:
            self.sealed_many(sealed)

    def write_data(self, pending: list[Pending]) -> None:
        """The bytes of every run of ``pending`` to the data plane: one call over all their tokens when
        the store takes many (slot, block, offset, token) at once, else one call per page."""
        many = getattr(self.storage.data, "write_tokens_many", None)
        total = sum(len(toks) for _, _, toks, _ in pending)
        if many is not None and len(pending) > 1 and total >= 32:
            counts = np.fromiter((len(toks) for _, _, toks, _ in pending), dtype=np.int64, count=len(pending))
            try:
                toks_all = np.fromiter((t for _, _, toks, _ in pending for t in toks), dtype=np.int64,
                                       count=total).view(np.uint64)
            except OverflowError:
                toks_all = None
            if toks_all is not None:
                ends = np.cumsum(counts)
                within = np.arange(total, dtype=np.int64) - np.repeat(ends - counts, counts)
                fills = np.fromiter((fill for _, fill, _, _ in pending), dtype=np.int64, count=len(pending))
                slots = np.fromiter((rec.gpu_slot for rec, _, _, _ in pending), dtype=np.int64, count=len(pending))
                depths = np.fromiter((rec.depth for rec, _, _, _ in pending), dtype=np.int64, count=len(pending))
                many(np.repeat(slots, counts), np.repeat(depths, counts), np.repeat(fills, counts) + within, toks_all)
                return
        write = self.storage.data.write_tokens
        for rec, fill, toks, _ in pending:
            write(rec.gpu_slot, rec.depth, fill, toks)

    def sealed_many(self, recs: list[PageRecord]) -> None:
        """Pages that took their last token (committed): their hashes into the index, then their
        morphology proposed, each proposal one batch over them (``Morphology.maintain_many``)."""
        for rec in recs:
            self._index_sealed(rec)
        pids = list(map(_PID, recs))
        if self.config.auto_compress:
            self.morph.maintain_many(pids)
        elif self.config.auto_admit:
            for pid in pids:
                self.morph.admit(pid)

    def _index_sealed(self, rec: PageRecord) -> None:
        assert rec.hash is not None
        rec.meta.hash = rec.hash
        rec.meta.recovery_tokens = self.C * (rec.depth + 1)
        rec.token_ids = self.index.seal(rec.pid, rec.parent, rec.token_ids)
        self.index.add_sealed(rec.hash, rec.pid)
        self.seam.updated(rec)


def _setter(obj: object, name: str, value: object) -> Callable[[], None]:
    return lambda: setattr(obj, name, value)


def _none(_: object) -> None:
    return None


_PID = attrgetter("pid")
