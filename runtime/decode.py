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
from collections.abc import Callable, Sequence
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
from .tips import Tips


class DecodeStep:
    """Writes one token for each of many distinct sequences (see the module docstring)."""

    def __init__(self, pipe: Pipeline, pages: PageDirectory, storage: Storage, writer: PageWriter,
                 morph: Morphology, seam: PolicySeam, config: RuntimeConfig) -> None:
        self.pipe, self.pages, self.storage, self.writer = pipe, pages, storage, writer
        self.morph, self.seam, self.config = morph, seam, config
        self.store = pipe.store
        self.tips = writer.tips
        self.C = c = config.page_size
        self.kinds = np.full(max(c, 1), _PLAIN, dtype=np.int8)  # by fill: opens at 0, seals at C-1
        self.kinds[0], self.kinds[-1] = _OPENS, _SEALS
        self._ensured: np.ndarray | None = None  # the last step's reader ids (tip rows made for them)

    def run(self, readers: list[ReaderRecord], tokens: Sequence[int]) -> list[int]:
        """Write ``tokens[i]`` at the frontier of ``readers[i]`` (distinct readers) by kind; returns the
        indices of the sequences left to append one by one."""
        n, c = len(readers), self.C
        known = getattr(readers, "rids", None)
        rids: np.ndarray = np.fromiter(map(_RID, readers), dtype=np.int64, count=n) if known is None else known
        front = self.store.rvecs[FRONTIER][rids]
        limit = self.config.max_sequence_tokens
        room = None if not n or int(front.max()) < limit else front < limit  # None: room for every one
        later: list[int] = [] if room is None else np.flatnonzero(~room).tolist()
        if c <= 1:  # every token opens and seals its page
            return sorted(later + (list(range(n)) if room is None else np.flatnonzero(room).tolist()))
        if rids is not self._ensured:  # the same readers as a step before: their tip rows exist
            self.tips.ensure(int(rids.max()))
            self._ensured = rids
        fill = front % c
        kind = self.kinds[fill]
        plain = kind == _PLAIN
        if room is not None:
            plain &= room
        idx = np.flatnonzero(plain)
        opens: list[int] = []
        seals: list[int] = []
        if len(idx) < n:  # the few at a page's first or last token, split by their kind
            at = np.flatnonzero(~plain if room is None else ~plain & room)
            for i, k in zip(at.tolist(), kind[at].tolist(), strict=True):
                (opens if k == _OPENS else seals).append(i)
        step = _Step(readers, tokens, rids, front, fill)
        try:
            return self.by_kind(step, idx, opens, seals, later)
        finally:
            self.flush(step)

    def by_kind(self, step: _Step, idx: np.ndarray, opens: list[int], seals: list[int], later: list[int]) -> list[int]:
        """Every kind in one transaction; returns ``later`` with the sequences left to the one-by-one
        path: the opening ones when their kind is refused (the others then written again without
        them), the sealing ones when theirs is, and the plain appends the spec refused."""
        if opens:
            try:
                return later + self.write(step, idx, opens, seals)
            except MorphcacheError:  # the opening sequences one by one, the others again
                later += opens
        if len(idx) or seals:
            later += self.write(step, idx, [], seals)
        return later

    def write(self, step: _Step, idx: np.ndarray, opens: list[int], seals: list[int]) -> list[int]:
        """The sequences ``idx`` (each in the middle of a page) and ``opens`` (each at a page boundary)
        take their token: a fresh page for each of ``opens`` (``open`` over those readers, all or none),
        then one batch of ``append`` over them all, each firing on its own; then ``seals`` take their
        page's last token (``seal``, the chain hashes, the slides: a part of the transaction that stands
        or falls alone); then records, bytes, the policy and the sealed pages' morphology.  Returns the
        sequences of ``idx`` the spec refused, and ``seals`` when their part was refused.  With
        ``opens``, a MorphcacheError (nothing changed) when an open or an opening sequence's first token
        is refused, or the GPU pool lacks a free slot for each page opened.

        The pages come from the tip columns (tips.py), one array index for the whole batch.  The batch
        is passed as distinct: its readers are (the step's sequences), and two firings on one page could
        not both pass the guard (``block[r, p] == 'in'`` on a ``filling`` page: one holder, by the
        spec's invariants), so each firing is decided as it would be alone."""
        writer, tips, k = self.writer, self.tips, len(opens)
        if k and len(self.storage.slots.free_slots) < k:
            raise CapacityError(f"GPU pool: {k} pages to open, {len(self.storage.slots.free_slots)} free slots")
        rids = step.rids
        openers = _pick(step.readers, opens) if k else []
        every = np.concatenate((idx, np.asarray(opens, dtype=np.int64))) if k else idx
        whole = not k and len(idx) == len(rids)  # every sequence, in order
        who = rids if whole else rids[every]
        opened: list[PageRecord] = []
        decided: list[Any] = []
        sealing = [_Sealing(step, seals, tips)] if seals else []
        refused: list[int] = []

        def events(pending: list[Pending]) -> None:
            if k:
                opened.extend(writer.fresh_many(openers))
                self.fire_all("open", list(map(_RID, openers)), list(map(_PID, opened)))
                writer.link_many(openers, opened)
            pids = tips.page[who]
            fired = self.pipe.fire_batch("append", who, pids, atomic=False, distinct=True)
            every_fired = bool(fired.all())
            if k and not every_fired and not fired[len(idx):].all():
                raise _OpenRefused("an opening sequence's first token was refused")
            decided.extend((pids, fired, every_fired))
            if sealing and not writer.attempt(lambda: self.seal_events(sealing[0])):
                refused.extend(sealing.pop().seals)

        def after(pending: list[Pending]) -> None:
            pids, fired, every_fired = decided
            which, sel = every, who
            if not every_fired:  # plain appends the spec refused: left to the one-by-one path
                refused.extend(every[~fired].tolist())
                which, pids, sel = every[fired], pids[fired], who[fired]
            seam = self.seam
            if k:
                for rec in opened:
                    seam.inserted(rec)
                seam.holders(list(map(_PID, opened)), 1)
            seam.tick()
            every_one = whole and which is every  # every sequence of the step, in order
            toks = step.array if every_one else step.array[which]
            deque(map(list.append, tips.tokens[sel], toks.tolist()), maxlen=0)
            step.held.append(None if every_one else which)
            for rec in opened:
                rec.meta.tokens = 1
            if not sealing:
                seam.accessed(pids)
                return
            done, c = sealing[0], self.C
            for rec, token in zip(done.recs, done.tokens, strict=True):
                rec.extend((token,))
                rec.meta.tokens = c
            step.held.append(done.at)
            self.flush(step)  # the bytes before the pages' morphology (compression reads them)
            seam.accessed(np.concatenate((pids, done.pids)))
            writer.sealed_many(done.recs, done.rows)

        if k or seals:
            writer.transaction(events, after)
        else:  # each firing on its own, nothing to undo
            events([])
            after([])
        return refused

    def seal_events(self, s: _Sealing) -> None:
        """Each sealing sequence's filling page takes its last token: ``seal`` (one batch over the
        readers), the chain hashes, the windows the seals left behind slid (proposals)."""
        writer = self.writer
        self.fire_all("seal", s.rids.tolist(), s.pids.tolist())
        s.rows = writer.seal_hashes(s.recs, s.tokens)
        if self.config.auto_slide:  # windows W tokens behind the frontiers the seals reached
            writer.undo(_restore_slides(s.readers))
            for reader in s.readers:
                self.morph.auto_slide(reader)

    def flush(self, step: _Step) -> None:
        """The bytes of the step's tokens written so far, in one data-plane call when the store takes
        many (slot, block, offset, token) at once."""
        held, step.held = step.held, []
        if not held:
            return
        n = len(step.rids)
        if sum(n if h is None else len(h) for h in held) == n:  # every sequence of the step (each held once)
            rids, front, offsets, toks = step.rids, step.front, step.fill, step.array
        else:
            sel = np.concatenate([np.arange(n) if h is None else h for h in held]) if len(held) > 1 else held[0]
            rids, front, offsets, toks = step.rids[sel], step.front[sel], step.fill[sel], step.array[sel]
        slots, depths = self.tips.slot[rids], front // self.C
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
        fire = self.pipe.firer(event)
        for rid, pid in zip(rids, pids, strict=True):
            fire(rid, pid, None, None)


class _Step:
    """One step's sequences and what the step reads of them once: reader ids, frontiers, fills, and
    the tokens as an array."""

    __slots__ = ("readers", "tokens", "rids", "front", "fill", "array", "held")

    def __init__(self, readers: list[ReaderRecord], tokens: Sequence[int], rids: np.ndarray, front: np.ndarray,
                 fill: np.ndarray) -> None:
        self.readers, self.tokens, self.rids, self.front, self.fill = readers, tokens, rids, front, fill
        words = tokens if isinstance(tokens, array) and tokens.typecode == "Q" else array("Q", tokens)
        self.array = np.frombuffer(words, dtype=np.uint64)
        self.held: list[np.ndarray | None] = []  # the sequences whose bytes are decided, not yet written (None: all)


class _Sealing:
    """The sealing sequences of a step (their positions ``seals``, as an array ``at``), their readers,
    last tokens, reader ids, pages and records, and the rows of their tokens once hashed."""

    __slots__ = ("seals", "at", "readers", "tokens", "rids", "pids", "recs", "rows")

    def __init__(self, step: _Step, seals: list[int], tips: Tips) -> None:
        self.seals, self.at = seals, np.array(seals, dtype=np.int64)
        self.readers, self.tokens = _pick(step.readers, seals), _pick(step.tokens, seals)
        self.rids = step.rids[self.at]
        self.pids = tips.page[self.rids]
        self.recs: list[PageRecord] = tips.record[self.rids].tolist()
        self.rows: np.ndarray | None = None


class _OpenRefused(MorphcacheError):
    """An opening sequence's first token was refused (the step's opens then go one by one)."""


def _pick(items: Sequence[Any], idx: list[int]) -> list[Any]:
    """``[items[i] for i in idx]`` in one C-level call."""
    if len(idx) <= 1:
        return [items[i] for i in idx]
    return list(itemgetter(*idx)(items))


def _restore_slides(readers: list[ReaderRecord]) -> Callable[[], None]:
    """What puts the readers' ``slide_next`` back as it is now."""
    saved = [(reader, reader.slide_next) for reader in readers]

    def undo() -> None:
        for reader, value in saved:
            reader.slide_next = value
    return undo


_RID, _PID = attrgetter("rid"), attrgetter("pid")
_OPENS, _PLAIN, _SEALS = 0, 1, 2  # a sequence's kind in the step, by the fill of its page
