"""Sequences: register, append (one sequence, or one token for many: a decode step), attach a leased
prefix, capture, free.  Each call is one transaction of spec events.

Token and page arithmetic (C = page size)::

    tokens     0 .......... C-1 | C ......... 2C-1 | 2C ..... frontier-1 |
    blocks     [    page 0     ][     page 1      ][  page 2 (filling)  ]
    append     open(r, p) at a page boundary, append(r, p) per token, seal(r, p) on its last token
    after      sealed pages are hashed into the index, then compressed, indexed, admitted and slid
               out of the window (proposals the spec decides)

Each call's events run in one ``PageWriter`` transaction (pagewriter.py): room made first, a refusal
leaves everything as it was, bytes written once the events commit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .binding import BLOCK, LPIN, POOL, TAIL
from .collect import Collector
from .config import RuntimeConfig
from .decode import DecodeStep
from .errors import BadInputError, DuplicateSequenceError, MorphcacheError
from .index import PrefixIndex
from .inputs import Spans, token_types
from .lease import Lease
from .morphology import Morphology
from .pages import PageDirectory
from .pagewriter import PageWriter, Pending
from .pipeline import Pipeline
from .readers import ReaderRecord, ReaderTable
from .seam import PolicySeam
from .tiering import TierMover
from .tiers import Storage

SHORT_TABLE = 64  # block tables up to this many pages are read page by page (numpy's fixed cost is more)


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
        self._sealed_codes = (codes[TAIL]["sealed"], codes[TAIL]["released"])
        self._pooled = codes[POOL]["pooled"]
        self.writer = PageWriter(pipe, pages, readers, index, storage, tiers, morph, seam, config)
        self.short_table = SHORT_TABLE  # (0: every block table read with arrays, as a long one, every batch
        # of an attach or a free through ``fire_batch``)
        self.step = DecodeStep(pipe, pages, storage, self.writer, morph, seam, config)

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
            if len(tokens):  # (no tokens: no page to open, nothing to write)
                self.writer.events(reader, 0, tokens, kinds, pending)

        try:
            if len(tokens):
                self.writer.room(reader, 0, len(tokens))
            self.writer.transaction(events)  # (with no tokens too: the last write's undo list is let go here)
        except BaseException:
            self.readers.retire_if_idle(reader)
            raise
        return self.frontier(reader)

    def free(self, reader: ReaderRecord) -> None:
        """End the sequence: every page leaves its block table (``detach``), then ``free``; its sealed
        pages are proposed for the pool and what nothing holds is forgotten.  Its leases stay.  A short
        table (up to ``short_table`` pages) is read as its list."""
        block = reader.block
        pipe, rid = self.pipe, reader.rid
        short = len(block) <= self.short_table
        pids = None if short and not self.store.in_array_form((BLOCK,), rid) else self._block_ids(reader)

        # (a write's transaction, though no page is written: the last write's undo list is let go here)
        def events(pending: list[Pending]) -> None:
            if block:
                self._fire_pages("detach", rid, pids, block)
            pipe.fire("free", rid)

        self.writer.transaction(events)
        reader.block = []
        self.writer.tips.point(rid, None)
        reader.slide_next = 0
        if not block:
            self.readers.retire_if_idle(reader)
            return
        self.seam.holders(block if pids is None else pids, -1, block)
        if self.config.auto_admit:
            records, admit = self.pages.records, self.morph.admit
            for pid in self._sealed_private(block, pids):
                if pid in records:
                    admit(pid)
        if short:
            self.collector.collect_many(block[::-1])
        else:
            assert pids is not None
            self.collector.collect_many(pids[::-1])
        self.readers.retire_if_idle(reader)

    def _fire_pages(self, name: str, rid: int, ids: np.ndarray | None, listed: list[int]) -> None:
        """``fire_batch(name, rid, ids)`` over distinct pages (``listed`` the same as a list; ``ids`` None:
        made when needed) inside the caller's transaction (``Pipeline.fire_within``; ``short_table`` 0:
        always through ``fire_batch``)."""
        if self.short_table:
            self.pipe.fire_within(name, rid, ids, listed)
        else:
            self.pipe.fire_batch(name, rid, np.array(listed, dtype=np.int64) if ids is None else ids, distinct=True)

    def _sealed_private(self, block: list[int], pids: np.ndarray | None) -> list[int]:
        """The pages of a block table (``block``, ``pids`` the same as an array or None) whose tail is
        sealed or released and that are not in the pool, in block order: scalar reads for a short table
        (numpy's fixed cost is more), two gathers for a long one."""
        store, (done, released), pooled = self.store, self._sealed_codes, self._pooled
        if pids is None or len(block) <= self.short_table:
            tail, pool = store.cols[TAIL], store.cols[POOL]
            sealed = self._sealed_codes  # (the pool read first: most pages of a freed table are pooled)
            return [pid for pid in block if pool[pid] != pooled and tail[pid] in sealed]
        tails = store.vecs[TAIL][pids]
        return pids[((tails == done) | (tails == released)) & (store.vecs[POOL][pids] != pooled)].tolist()

    def _block_ids(self, reader: ReaderRecord) -> np.ndarray:
        """The reader's block table as an array: its ``block`` row's own pages when the row is kept in
        array form (an attached prefix and the pages opened after it, in block order: the batches that
        read and write the row know it at once by identity), else converted from the list."""
        block, store = reader.block, self.store
        if store.in_array_form((BLOCK,), reader.rid):
            ids = store.pages_array((BLOCK,), reader.rid)
            if len(ids) == len(block) and (not block or (ids[0] == block[0] and ids[-1] == block[-1])):
                return ids
        return np.array(block, dtype=np.int64)

    # -- append -----------------------------------------------------------------------------------
    def append(self, reader: ReaderRecord, tokens: Sequence[int], types: Spans = None) -> int:
        """Write ``tokens`` at the frontier; all of them or none.  Returns the new frontier."""
        kinds = token_types(types, len(tokens))
        start = self.frontier(reader)
        if start + len(tokens) > self.config.max_sequence_tokens:
            raise BadInputError(f"sequence {reader.name!r}: {start} + {len(tokens)} tokens exceeds "
                                f"max_sequence_tokens {self.config.max_sequence_tokens}")
        self.writer.room(reader, start, len(tokens))
        self.writer.transaction(lambda pending: self.writer.events(reader, start, tokens, kinds, pending))
        return self.frontier(reader)

    def append_many(self, readers: list[ReaderRecord], tokens: list[Sequence[int]],
                    single: Sequence[int] | None = None) -> list[MorphcacheError]:
        """``append`` for each of many distinct sequences: a decode step.  Single tokens are written by
        kind, each kind in one transaction of batched events: those that neither open nor seal a page
        (one vector batch of ``append``, each firing on its own), those that open one (``open`` then
        ``append``), those that seal one (``seal``, slides, then the sealed pages' morphology); a kind
        refused as a whole goes one by one, as do longer runs of tokens.  ``single``: the token of each
        sequence, when the caller knows every one appends exactly one.  Returns the refusals (each
        sequence on its own), in the order of ``readers``."""
        if single is None:
            one = [i for i, toks in enumerate(tokens) if len(toks) == 1]
            later = [i for i, toks in enumerate(tokens) if len(toks) != 1]
            if one:
                later += [one[i] for i in self.step.run([readers[i] for i in one], [int(tokens[i][0]) for i in one])]
        else:
            later = self.step.run(readers, single)
        errors: list[tuple[int, MorphcacheError]] = []
        for i in sorted(later):
            try:
                self.append(readers[i], tokens[i])
            except MorphcacheError as exc:
                errors.append((i, exc))
        return [exc for _, exc in errors]

    # -- attach -----------------------------------------------------------------------------------
    def attach(self, reader: ReaderRecord, lease: Lease, types: Spans = None) -> int:
        """Start an empty sequence with a leased prefix: its whole pages join the block table (spec
        ``attach``, the reader pinning them for the moment if the lease is another reader's), the
        partial page is copied into a fresh page of the sequence (typed by ``types``, spans over the
        lease's tokens, when given).  The lease stays held."""
        if reader.block:
            raise BadInputError(f"attach needs an empty sequence; {reader.name!r} has "
                                f"{self.frontier(reader)} tokens")
        part = lease.partial
        full = lease.page_ids
        listed = full.tolist()
        extra = len(part.tokens) if part is not None and part.tokens else 0
        kinds = token_types(types, lease.tokens)
        part_kinds = kinds[len(full) * self.C:] if kinds is not None else None
        self.writer.room(reader, len(full) * self.C, extra)
        own = lease.reader == reader.rid
        pipe, rid, tips = self.pipe, reader.rid, self.writer.tips

        def emptied() -> None:
            reader.block.clear()
            tips.point(rid, None)

        def events(pending: list[Pending]) -> None:
            if listed:
                pipe.fire("begin_attach", rid)
                if not own:
                    self._fire_pages("acquire", rid, full, listed)
                self._fire_pages("attach", rid, full, listed)
                if not own:
                    counts = self.store.varrays[LPIN].gather(rid, full)
                    more, last = full[counts > 1], full[counts <= 1]
                    if len(more):
                        self._fire_pages("release", rid, more, more.tolist())
                    if len(last):
                        self._fire_pages("release_last", rid, last, last.tolist())
                reader.block.extend(listed)  # (the table was empty: its tip too, and so again if undone)
                tips.point(rid, self.pages.records[listed[-1]])
                self.writer.undo(emptied)
                pipe.fire("end_attach", rid)  # the windows the reader's kernels will read are there
            if extra:
                self.writer.events(reader, len(full) * self.C, part.tokens, part_kinds,  # type: ignore[union-attr]
                                   pending)

        # the partial page's bytes: the lease's copy alone (``write_prefix`` covers every token the write
        # put there: its bytes from the tokens would be overwritten at once)
        self.writer.transaction(events, lambda pending: self.writer.done.written(pending, data=False))
        self.seam.holders(full, 1, listed)
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

        self.writer.transaction(events)

    def slide(self, reader: ReaderRecord) -> int:
        """Propose ``slide`` for every live window of the sequence; how many slid."""
        return self.morph.slide(reader)
