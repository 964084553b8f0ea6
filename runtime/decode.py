"""A decode step: one token for each of many sequences, written by kind, in batched spec events.

Token and page arithmetic (C = page size, a sequence's next token lands at ``frontier``)::

    fill = frontier % C        0            1 .. C-2          C-1
    kind                       opens        plain             seals
    events                     open(r, p)   append(r, p)      seal(r, p), then slide proposals
                               append(r, p)                   for the windows the seal left behind
    after                      policy told                    the step's bytes; sealed pages hashed
                                                              into the index, compressed, indexed,
                                                              admitted

    opens    fresh page ids, records and slots; ``open`` as one batch over the readers (one page
             each), all or none
    appends  one batch of ``append`` over the plain and the opening sequences, each firing on its
             own (a plain one refused is left to the one-by-one path; an opening one refused undoes
             the opens: one transaction)
    seals    ``seal`` as one batch, the chain hashes, the slides: one transaction, all or none; after
             the commit the bytes of the whole step in one data-plane call, then the morphology
             proposals, event by event over the sealed pages

Each sequence's page, its GPU slot and record come from the tip columns (tips.py): one array index
for the step, no pass over the block tables; the step's reader ids, frontiers, fills and tokens are
read once (``_Step``).

A kind refused as a whole (a guard, a full GPU pool) goes one by one through ``Sequences.append``,
which reports each sequence's own refusal; so do sequences at their ``max_sequence_tokens``.  A batch
shorter than the vector backend takes fires each event alone, as the pipeline would.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from . import pipeline
from .binding import FRONTIER
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
        self.tips = writer.tips
        self.C = config.page_size

    def run(self, readers: list[ReaderRecord], tokens: list[int]) -> list[int]:
        """Write ``tokens[i]`` at the frontier of ``readers[i]`` (distinct readers) by kind; returns the
        indices of the sequences left to append one by one."""
        n, c = len(readers), self.C
        rids = getattr(readers, "rids", None)
        if rids is None:
            rids = np.fromiter(map(_RID, readers), dtype=np.int64, count=n)
        front = self.store.rvecs[FRONTIER][rids]
        fill = front % c
        room = front < self.config.max_sequence_tokens
        full = bool(room.all())
        later: list[int] = [] if full else np.flatnonzero(~room).tolist()
        if c <= 1:  # every token opens and seals its page
            return sorted(later + np.flatnonzero(room).tolist())
        self.tips.ensure(int(rids.max()))
        plain = (fill != 0) & (fill != c - 1)
        if not full:
            plain &= room
        idx = np.flatnonzero(plain)
        opens = np.flatnonzero((fill == 0) & room).tolist() if len(idx) < n else []
        seals = np.flatnonzero((fill == c - 1) & room).tolist() if len(idx) < n else []
        step = _Step(readers, tokens, rids, front, fill)
        try:
            return self.by_kind(step, idx, opens, seals, later)
        finally:
            self.flush(step)

    def by_kind(self, step: _Step, idx: np.ndarray, opens: list[int], seals: list[int], later: list[int]) -> list[int]:
        """The plain and opening sequences, then the sealing ones; returns ``later`` with the
        sequences left to the one-by-one path."""
        if opens:
            try:
                later += self.appends(step, idx, opens)
            except MorphcacheError:  # the opening sequences one by one, the others again
                later += opens
                opens = []
        if len(idx) and not opens:
            later += self.appends(step, idx, [])
        if seals:
            try:
                self.seal_many(step, seals)
            except MorphcacheError:
                later += seals
        return later

    def appends(self, step: _Step, idx: np.ndarray, opens: list[int]) -> list[int]:
        """The sequences ``idx`` (each in the middle of a page) and ``opens`` (each at a page boundary)
        take their token: a fresh page for each of ``opens`` (``open``, one batch over those readers, all
        or none), then one batch of ``append`` over them all, each firing on its own; then records,
        bytes and the policy.  Returns the sequences of ``idx`` the spec refused.  With ``opens``, one
        transaction, and a MorphcacheError (nothing changed) when an open or an opening sequence's first
        token is refused, or the GPU pool lacks a free slot for each page opened.

        The pages come from the tip columns (tips.py), one array index for the whole batch.  The batch
        is passed as distinct: its readers are (the step's sequences), and two firings on one page could
        not both pass the guard (``block[r, p] == 'in'`` on a ``filling`` page: one holder, by the
        spec's invariants), so each firing is decided as it would be alone."""
        writer, tips, k, c = self.writer, self.tips, len(opens), self.C
        if k and len(self.storage.slots.free_slots) < k:
            raise CapacityError(f"GPU pool: {k} pages to open, {len(self.storage.slots.free_slots)} free slots")
        rids = step.rids
        openers = _pick(step.readers, opens) if k else []
        every = np.concatenate((idx, np.asarray(opens, dtype=np.int64))) if k else idx
        whole = not k and len(idx) == len(rids)  # every sequence, in order
        who = rids if whole else rids[every]
        opened: list[PageRecord] = []
        decided: list[np.ndarray] = []

        def events(pending: list[Pending]) -> None:
            if k:
                opened.extend(map(writer.fresh, openers))
                self.fire_all("open", list(map(_RID, openers)), list(map(_PID, opened)))
                deque(map(writer.link, openers, opened), maxlen=0)
            pids = tips.page[who]
            fired = self.pipe.fire_batch("append", who, pids, atomic=False, distinct=True)
            if k and not fired[len(idx):].all():
                raise _OpenRefused("an opening sequence's first token was refused")
            decided.extend((pids, fired))

        refused: list[int] = []

        def after(pending: list[Pending]) -> None:
            pids, fired = decided
            which, sel = every, who
            if not fired.all():  # plain appends the spec refused: left to the one-by-one path
                refused.extend(every[~fired].tolist())
                which, pids, sel = every[fired], pids[fired], who[fired]
            seam = self.seam
            if k:
                for rec in opened:
                    seam.inserted(rec)
                seam.holders(list(map(_PID, opened)), 1)
            seam.tick()
            recs = tips.record[sel]
            toks = step.array if whole and which is every else step.array[which]
            deque(map(list.append, map(_TOKENS, recs), toks.tolist()), maxlen=0)
            step.held.append((tips.slot[sel], step.front[which] // c, step.fill[which], toks))
            for rec in opened:
                rec.meta.tokens = 1
            seam.accessed(pids)

        if k:
            writer.transaction(events, after)
        else:  # each firing on its own, nothing to undo
            events([])
            after([])
        return refused

    def seal_many(self, step: _Step, seals: list[int]) -> None:
        """Each of the sequences ``seals``' filling page takes its last token: ``seal`` (one batch over
        the readers), the chain hashes, the windows the seals left behind slid (proposals), in one
        transaction, all of them or none; then the step's bytes, and the sealed pages' index entries
        and morphology."""
        readers, tokens, rids = _pick(step.readers, seals), _pick(step.tokens, seals), step.rids[seals]
        writer, morph, c = self.writer, self.morph, self.C
        pids = self.tips.page[rids].tolist()
        recs = self.tips.record[rids].tolist()

        def events(pending: list[Pending]) -> None:
            self.fire_all("seal", rids.tolist(), pids)
            for rec, token in zip(recs, tokens, strict=True):
                writer.seal_hash(rec, (token,))
            if self.config.auto_slide:  # windows W tokens behind the frontiers the seals reached
                for reader in readers:
                    writer.undo(_restore_slide(reader, reader.slide_next))
                    morph.auto_slide(reader)

        def after(pending: list[Pending]) -> None:
            self.seam.tick()
            for rec, token in zip(recs, tokens, strict=True):
                rec.token_ids.append(token)
                rec.meta.tokens = c
            step.held.append((self.tips.slot[rids], step.front[seals] // c, step.fill[seals], step.array[seals]))
            self.flush(step)  # the bytes before the pages' morphology (compression reads them)
            self.seam.accessed(pids)
            writer.sealed_many(recs)

        writer.transaction(events, after)

    def flush(self, step: _Step) -> None:
        """The bytes of the step's tokens written so far, in one data-plane call when the store takes
        many (slot, block, offset, token) at once."""
        held, step.held = step.held, []
        if not held:
            return
        cols = held[0] if len(held) == 1 else tuple(np.concatenate(x) for x in zip(*held, strict=True))
        slots, depths, offsets, toks = cols
        many = getattr(self.storage.data, "write_tokens_many", None)
        if many is not None:
            many(slots, depths, offsets, toks)
            return
        write = self.storage.data.write_tokens
        for slot, depth, offset, token in zip(slots.tolist(), depths.tolist(), offsets.tolist(), toks.tolist(),
                                              strict=True):
            write(slot, depth, offset, (token,))

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


class _Step:
    """One step's sequences and what the step reads of them once: reader ids, frontiers, fills, and
    the tokens as an array."""

    __slots__ = ("readers", "tokens", "rids", "front", "fill", "array", "held")

    def __init__(self, readers: list[ReaderRecord], tokens: list[int], rids: np.ndarray, front: np.ndarray,
                 fill: np.ndarray) -> None:
        self.readers, self.tokens, self.rids, self.front, self.fill = readers, tokens, rids, front, fill
        self.array = np.frombuffer(array("Q", tokens), dtype=np.uint64)
        self.held: list[tuple[np.ndarray, ...]] = []  # bytes decided, not yet written: (slots, blocks, offsets, tokens)


class _OpenRefused(MorphcacheError):
    """An opening sequence's first token was refused (the step's opens then go one by one)."""


def _pick(items: list[Any], idx: list[int]) -> list[Any]:
    """``[items[i] for i in idx]`` in one C-level call."""
    if len(idx) <= 1:
        return [items[i] for i in idx]
    return list(itemgetter(*idx)(items))


def _restore_slide(reader: ReaderRecord, value: int) -> Callable[[], None]:
    def undo() -> None:
        reader.slide_next = value
    return undo


_RID, _PID, _TOKENS = attrgetter("rid"), attrgetter("pid"), attrgetter("token_ids")
