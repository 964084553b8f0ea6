"""A decode step: one token for each of many sequences, written by kind, each kind in one transaction of
batched spec events.

Token and page arithmetic (C = page size, a sequence's next token lands at ``frontier``)::

    fill = frontier % C        0            1 .. C-2          C-1
    kind                       opens        plain             seals
    events                     open(r, p)   append(r, p)      seal(r, p), then slide proposals
                               append(r, p)                   for the windows the seal left behind
    after                      bytes written, policy told;    sealed pages hashed into the index,
                                                              compressed, indexed, admitted

    plain    one batch of ``append`` over the sequences, each firing on its own (a refused one is
             left to the one-by-one path); the bytes in one data-plane call
    opens    fresh page ids, records and slots; ``open`` as one batch over the readers (one page
             each), then ``append``: all of them or none
    seals    ``seal`` as one batch, the chain hashes, the slides: all of them or none; after the
             commit the morphology proposals, event by event over the sealed pages

A kind refused as a whole (a guard, a full GPU pool) goes one by one through ``Sequences.append``,
which reports each sequence's own refusal; so do sequences at their ``max_sequence_tokens``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from . import pipeline
from .binding import DEPTH, FRONTIER
from .config import RuntimeConfig
from .errors import CapacityError, MorphcacheError
from .morphology import Morphology
from .pages import PageDirectory, PageRecord
from .pagewriter import PageWriter, Pending
from .pipeline import Pipeline
from .readers import ReaderRecord
from .seam import PolicySeam
from .tiers import Storage


class DecodeStep:
    """Writes one token for each of many distinct sequences (see the module docstring)."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, storage: Storage, writer: PageWriter,
                 morph: Morphology, seam: PolicySeam, config: RuntimeConfig) -> None:
        self.pipe, self.pages, self.storage, self.writer = pipe, pages, storage, writer
        self.morph, self.seam, self.config = morph, seam, config
        self.store = pipe.store
        self.C = config.page_size

    def run(self, readers: list[ReaderRecord], tokens: list[int]) -> list[int]:
        """Write ``tokens[i]`` at the frontier of ``readers[i]`` (distinct readers) by kind; returns the
        indices of the sequences left to append one by one."""
        n, c = len(readers), self.C
        rids = np.fromiter(map(_RID, readers), dtype=np.int64, count=n)
        front = self.store.rvecs[FRONTIER][rids]
        fill = front % c
        room = front < self.config.max_sequence_tokens
        full = bool(room.all())
        later: list[int] = [] if full else np.flatnonzero(~room).tolist()
        if c <= 1:  # every token opens and seals its page
            return sorted(later + np.flatnonzero(room).tolist())
        plain = (fill != 0) & (fill != c - 1)
        if not full:
            plain &= room
        idx = np.flatnonzero(plain)
        if len(idx):
            later += self.plain(readers, tokens, rids, fill, idx)
        if len(idx) < n:
            opens = np.flatnonzero((fill == 0) & room).tolist()
            seals = np.flatnonzero((fill == c - 1) & room).tolist()
            for group, write in ((opens, self.open_many), (seals, self.seal_many)):
                if group:
                    try:
                        write(_pick(readers, group), _pick(tokens, group))
                    except MorphcacheError:
                        later += group
        return later

    def plain(self, readers: list[ReaderRecord], tokens: list[int], rids: np.ndarray, fill: np.ndarray,
              idx: np.ndarray) -> list[int]:
        """The sequences ``idx``, each in the middle of a page, take their token: one batch of ``append``
        (each firing on its own), then records and bytes; returns those the spec refused."""
        sel = _pick(readers, idx.tolist()) if len(idx) < len(readers) else readers
        pids = np.fromiter(map(_LAST, map(_BLOCK, sel)), dtype=np.int64, count=len(sel))
        plist = pids.tolist()
        fired = self.pipe.fire_batch("append", rids[idx], pids, atomic=False, distinct=len(set(plist)) == len(plist))
        refused: list[int] = []
        if not fired.all():
            refused = idx[~fired].tolist()
            idx, pids = idx[fired], pids[fired]
            plist = pids.tolist()
        recs = list(map(self.pages.records.__getitem__, plist))
        toks = _pick(tokens, idx.tolist()) if len(idx) < len(tokens) else tokens
        deque(map(list.append, map(_TOKENS, recs), toks), maxlen=0)
        many = getattr(self.storage.data, "write_tokens_many", None)
        if many is None:
            for rec, offset, token in zip(recs, fill[idx].tolist(), toks, strict=True):
                self.storage.data.write_tokens(rec.gpu_slot, rec.depth, offset, (token,))
        else:
            many(np.fromiter(map(_SLOT, recs), dtype=np.int64, count=len(recs)), self.store.vecs[DEPTH][pids],
                 fill[idx], np.asarray(toks, dtype=np.uint64))
        self.seam.tick()
        self.seam.accessed(plist)
        return refused

    def open_many(self, readers: list[ReaderRecord], tokens: list[int]) -> None:
        """Each reader, at a page boundary, takes a fresh page (``open``, one batch over the readers) and
        its first token there (``append``, one batch), in one transaction: all of them or none.
        CapacityError, nothing changed, when the GPU pool lacks a free slot for each (one by one, each
        makes its own room)."""
        k, writer = len(readers), self.writer
        free = len(self.storage.slots.free_slots)
        if free < k:
            raise CapacityError(f"GPU pool: {k} pages to open, {free} free slots")
        rids = list(map(_RID, readers))
        recs: list[PageRecord] = []

        def events(pending: list[Pending]) -> None:
            recs.extend(map(writer.fresh, readers))
            pids = list(map(_PID, recs))
            self.fire_all("open", rids, pids)
            deque(map(writer.link, readers, recs), maxlen=0)
            self.fire_all("append", rids, pids)

        def after(pending: list[Pending]) -> None:
            seam, pids = self.seam, list(map(_PID, recs))
            for rec in recs:
                seam.inserted(rec)
            seam.holders(pids, 1)
            seam.tick()
            writer.write_one_each(recs, tokens, [0] * k)
            for rec in recs:
                rec.meta.tokens = 1
            seam.accessed(pids)

        writer.transaction(events, after)

    def seal_many(self, readers: list[ReaderRecord], tokens: list[int]) -> None:
        """Each reader's filling page takes its last token: ``seal`` (one batch over the readers), the
        chain hashes, the windows the seals left behind slid (proposals), in one transaction, all of
        them or none; then the bytes, and the sealed pages' index entries and morphology."""
        k, writer, morph, c = len(readers), self.writer, self.morph, self.C
        pids = list(map(_LAST, map(_BLOCK, readers)))
        recs = list(map(self.pages.records.__getitem__, pids))

        def events(pending: list[Pending]) -> None:
            self.fire_all("seal", list(map(_RID, readers)), pids)
            for rec, token in zip(recs, tokens, strict=True):
                writer.seal_hash(rec, (token,))
            if self.config.auto_slide:  # windows W tokens behind the frontiers the seals reached
                for reader in readers:
                    writer.undo(_restore_slide(reader, reader.slide_next))
                    morph.auto_slide(reader)

        def after(pending: list[Pending]) -> None:
            self.seam.tick()
            writer.write_one_each(recs, tokens, [c - 1] * k)
            for rec in recs:
                rec.meta.tokens = c
            self.seam.accessed(pids)
            writer.sealed_many(recs)

        writer.transaction(events, after)


    def fire_all(self, event: str, rids: list[int], pids: list[int]) -> None:
        """Fire ``event`` for each reader on its page (distinct pages), inside the caller's transaction:
        one batch for the vector backend, or, a batch too short for it, each firing alone (as the
        pipeline fires such a batch, without a transaction of its own)."""
        if len(pids) >= pipeline.VECTOR_FROM:
            self.pipe.fire_batch(event, np.array(rids, dtype=np.int64), np.array(pids, dtype=np.int64), distinct=True)
            return
        fire = self.pipe.fire
        for rid, pid in zip(rids, pids, strict=True):
            fire(event, rid, pid)


def _pick(items: list[Any], idx: list[int]) -> list[Any]:
    """``[items[i] for i in idx]`` in one C-level call."""
    return [items[idx[0]]] if len(idx) == 1 else list(itemgetter(*idx)(items))


def _restore_slide(reader: ReaderRecord, value: int) -> Callable[[], None]:
    def undo() -> None:
        reader.slide_next = value
    return undo


_RID, _PID, _BLOCK, _LAST = attrgetter("rid"), attrgetter("pid"), attrgetter("block"), itemgetter(-1)
_TOKENS, _SLOT = attrgetter("tokens"), attrgetter("gpu_slot")
