"""Writing pages, inside one transaction of spec events: what register, append and attach share.

Token and page arithmetic (C = page size)::

    tokens     0 .......... C-1 | C ......... 2C-1 | 2C ..... frontier-1 |
    blocks     [    page 0     ][     page 1      ][  page 2 (filling)  ]
    events     open(r, p) at a page boundary, append(r, p) per token, seal(r, p) on a page's last
               token, page by page (an open needs the frontier the previous seal reached), each
               page's one generated chain (chainplan.py); after the write's last seal, slide
               proposals for the windows left behind (one batch when many)
    after      in bulk over the pages written: the bytes to the data plane (one call), the policy
               told (one tick), the records; the sealed pages hashed into the index, compressed,
               indexed and admitted (proposals the spec decides, batches over them)

Room is made before a transaction starts (a full GPU pool moves the policy's victims, never the
sequence's own pages); inside it only spec events and what undoes exactly with them happen (an
undo action is registered for each), so a refusal leaves everything as it was.  The bulk work after
a commit is ``WrittenPages`` (written.py).  The module is a little longer than most: the write loop,
the records it opens and what undoes them read best together.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from .chainhash import chain_hashes, run_keys
from .config import RuntimeConfig
from .errors import MorphcacheError
from .index import ROOT_HASH, PrefixIndex
from .morphology import Morphology
from .pages import PageDirectory, PageRecord
from .pipeline import Pipeline
from .readers import ReaderRecord, ReaderTable
from .seam import PolicySeam
from .tiering import TierMover
from .tiers import Storage
from .tips import Tips
from .written import Pending, WrittenPages

__all__ = ["PageWriter", "Pending"]


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
        self.done = WrittenPages(pages, index, storage, morph, seam, config)  # the bulk work after a commit

    @property
    def bulk(self) -> bool:
        """Whether the records and slots of a write's pages are made in one pass and its sealed rows stored
        as one array (False: page by page, the reference the bulk path is tested against)."""
        return self.done.bulk

    @bulk.setter
    def bulk(self, on: bool) -> None:
        self.done.bulk = on

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
        (after or self.done.written)(pending)

    def attempt(self, part: Callable[[], Any]) -> bool:
        """Run ``part`` inside the current transaction as a part that stands or falls alone: on a
        MorphcacheError what it did is undone (its spec events and the undo actions it registered) and
        False returned; the rest of the transaction stands."""
        pipe, undo = self.pipe, self._undo
        mark = len(undo)
        sp = pipe.begin()
        try:
            part()
        except MorphcacheError:
            pipe.rollback(sp)
            for fn in reversed(undo[mark:]):
                fn()
            del undo[mark:]
            return False
        pipe.commit()
        return True

    def events(self, reader: ReaderRecord, start: int, tokens: Sequence[int], kinds: list[str | None] | None,
               pending: list[Pending]) -> None:
        """Fire open/append/seal for ``tokens`` written at ``start`` (inside a transaction), page by page,
        each page's events one chain (``Pipeline.chain``); the sealed pages' hashes, and with them the
        records, slots and continuations of every page the write opens, made first (``open_run``); the
        records, slots, block table, continuations, hashes and tip it takes undone by one action::

            fill 2, 11 tokens, C = 4:   [ 4 5 | t0 t1 ] [ t2 .. t5 ] [ t6 .. t9 ] [ t10 ]
                                        the partial one   whole pages (2)         left filling
        """
        c, rid, n = self.C, reader.rid, len(tokens)
        if not n:
            return
        last_seal = (start + n) // c * c  # the frontier the write's last seal reaches
        slide = self.config.auto_slide and last_seal > start
        if slide:
            self.undo(_setter(reader, "slide_next", reader.slide_next))
        block = reader.block
        base = len(block)
        opened: list[PageRecord] = []  # records taken, filed as continuations, sealed: what the undo gives back
        filed: list[PageRecord] = []
        sealed: list[PageRecord] = []
        self.undo(lambda: self._unwrite(rid, block, base, opened, filed, sealed))
        hashes = self.write_hashes(reader, start, tokens)
        chain = self.pipe.chain("open", "append", "seal")  # a page's open?, appends, seal? (chainplan.py)
        fill = start % c
        i = 0
        if fill:  # the partial page the write continues
            rec = self.pages.records[block[-1]]
            i = min(c - fill, n)
            seals = fill + i == c
            chain(rid, rec.pid, False, i - seals, seals)
            if seals:  # sealed: the chain hash the next page's open needs
                rec.hash = hashes[0]
                sealed.append(rec)
                if slide and start + i == last_seal:  # windows W tokens behind the frontier it reached
                    self.morph.auto_slide(reader)
            if i == n:
                pending.append(([rec], fill, tokens, kinds or None))
                return
        if not self.bulk:
            fresh = self._open_each(reader, i, n, hashes[len(sealed):], opened, filed, sealed, chain, slide)
        else:
            fresh = self.open_run(reader, -(-(n - i) // c), hashes, fill > 0, opened, filed)
            whole, left = divmod(n - i, c)  # the pages it fills whole (opened and sealed), the tokens left
            done = fresh[:whole] if left else fresh
            take, full = self.storage.slots.take, c - 1
            if fresh[0].gpu_slot < 0:  # too few free slots for the whole run: taken page by page
                for page in done:
                    self.storage.place(page, take(page.pid), 0)
                    chain(rid, page.pid, True, full, True)
            else:
                for pid in map(_PID, done):
                    chain(rid, pid, True, full, True)
            block += map(_PID, done)  # (no chain reads the block table: linked after them, before a slide)
            if whole:  # sealed: their chain hashes (no page's open reads a record's)
                for page, h in zip(done, hashes[len(sealed):], strict=True):
                    page.hash = h
                sealed += done
                if slide:  # windows W tokens behind the frontier the last one reached
                    self.morph.auto_slide(reader)
            if left:
                page = fresh[-1]
                if page.gpu_slot < 0:
                    self.storage.place(page, take(page.pid), 0)
                chain(rid, page.pid, True, left, False)
                block.append(page.pid)
        self.tips.point(rid, fresh[-1])
        pending.append(([rec, *fresh] if fill else fresh, fill, tokens, kinds or None))

    def _open_each(self, reader: ReaderRecord, i: int, n: int, hashes: list[int], opened: list[PageRecord],
                   filed: list[PageRecord], sealed: list[PageRecord], chain: Any, slide: bool) -> list[PageRecord]:
        """``events``' pages opened from token ``i`` of ``n`` on, page by page: each one's record alone as
        it opens, then its slot, chain, link and continuation in turn (``bulk`` off: the reference
        ``open_run`` is tested against).  The pages opened."""
        c, rid, block, take = self.C, reader.rid, reader.block, self.storage.slots.take
        out: list[PageRecord] = []
        j = 0
        while i < n:
            rec = self.record(reader)
            opened.append(rec)
            self.storage.place(rec, take(rec.pid), 0)
            end = min(i + c, n)
            seals = end - i == c
            chain(rid, rec.pid, True, end - i - seals, seals)
            block.append(rec.pid)
            out.append(rec)
            self.index.add_child(rec.parent_hash, rec.pid, rec.token_ids, rec.parent)
            filed.append(rec)
            if seals:  # sealed: the chain hash the next page's open needs
                rec.hash = hashes[j]
                j += 1
                sealed.append(rec)
                if slide and n - end < c:  # windows W tokens behind the frontier it reached
                    self.morph.auto_slide(reader)
            i = end
        return out

    def open_run(self, reader: ReaderRecord, count: int, hashes: list[int], partial: bool,
                 opened: list[PageRecord], filed: list[PageRecord]) -> list[PageRecord]:
        """Fresh page ids, records, GPU slots (when that many are free; else none) and continuations for
        the ``count`` pages a write opens after the reader's block table, in block order (inside a
        transaction; appended to ``opened`` and ``filed``, which the caller undoes).  Each one's parent
        is the page before it; its parent hash the hash the write seals that page with (``hashes``, the
        write's sealed pages in order, its first the partial page the write completes when
        ``partial``), or the sealed last block's (the root's for an empty table)::

            partial, C = 4:   [ 4 5 | t0 t1 ] [ t2 t3 t4 t5 ] [ t6 ...     hashes h0 h1: opened #a after
                              (last block)     #a              #b          the last block, parent hash h0;
                                                                           #b after #a, parent hash h1
        """
        block, records = reader.block, self.pages.records
        parent = block[-1] if block else -1
        if partial:  # the first continues the partial page the write completes
            parent_hashes = hashes[:count]
        else:
            known = records[parent].hash if parent >= 0 else ROOT_HASH
            assert known is not None, "a page is opened only after its predecessor is sealed"
            parent_hashes = [known, *hashes[:count - 1]]
        pids = self.store.alloc_pages(count)
        pool = self.storage.slots
        slots = pool.take_many(pids) if len(pool.free_slots) >= count else None  # else taken as each opens
        run = PageRecord.opened_run(self.pages.cols, pids, parent, parent_hashes, len(block), reader.session,
                                    reader.task, reader.name, self.page_bytes, slots)
        self.pages.add_run(run, pids)
        opened += run
        if slots is not None:  # each slot's generation published (``Storage.place``)
            publish = self.storage.data.set_generation
            for slot in slots:
                publish(slot, 0)
        self.index.add_children(parent_hashes, pids, [rec.token_ids for rec in run], parent)
        filed += run
        return run

    def write_hashes(self, reader: ReaderRecord, start: int, tokens: Sequence[int]) -> list[int]:
        """The chain hash of each page a write of ``tokens`` at ``start`` seals, in page order, with the
        partial page it completes first (``run_keys``)::

            start = 6, C = 4:   [ 4 5 | t0 t1 ] [ t2 t3 t4 t5 ] [ t6 ...       the keys of two pages
        """
        c, block = self.C, reader.block
        fill, count = start % c, (start + len(tokens)) // c - start // c
        if not count:  # a write within one page, sealing none (a decode-like append)
            return []
        last = self.pages.records[block[-1]] if block else None
        head: list[int] = list(last.token_ids) if fill and last else []
        root = (last.parent_hash if fill else last.hash) if last else ROOT_HASH
        assert root is not None and len(head) == fill
        return run_keys(root, head, tokens, count, c)

    def _unwrite(self, rid: int, block: list[int], base: int, opened: list[PageRecord], filed: list[PageRecord],
                 sealed: list[PageRecord]) -> None:
        """Undo of ``events``' own records (one closure a write: no garbage a page until the commit, which
        would scatter the next request's token ints): hashes unset, continuations removed, the block
        table cut back to its ``base`` pages (the tip with it), slots and records given back."""
        for rec in sealed:
            rec.hash = None
        for rec in reversed(filed):
            self.index.remove_child(rec.parent_hash, rec.pid)
        if len(block) > base:
            del block[base:]
            self.tips.point(rid, self.pages.records[block[-1]] if block else None)
        self._give_back(opened)

    def _give_back(self, opened: list[PageRecord]) -> None:
        """Undo of taking ``opened``'s records and slots (``record`` and a slot each), latest first."""
        for rec in reversed(opened):
            self.storage.free_slot(rec)
            self.pages.remove(rec.pid)

    def seal_hashes(self, recs: list[PageRecord], last: Sequence[int]) -> np.ndarray:
        """``seal_hash`` for many pages, each sealed by one last token (``last[i]`` for ``recs[i]``, a decode
        step's): one digest over their rows (inside a transaction).  Returns the rows (pages x C tokens)."""
        flat: list[int] = []
        for rec, token in zip(recs, last, strict=True):
            flat += rec.token_ids
            flat.append(token)
        rows = np.frombuffer(array("Q", flat), dtype=np.uint64).reshape(len(recs), self.C)
        for rec, h in zip(recs, chain_hashes([rec.parent_hash for rec in recs], rows), strict=True):
            rec.hash = h
            self.undo(_setter(rec, "hash", None))
        return rows

    def record(self, reader: ReaderRecord) -> PageRecord:
        """A fresh page id and its record for the reader's next block (no slot; the caller undoes it)."""
        block = reader.block
        parent = block[-1] if block else -1
        parent_hash = self.pages.records[parent].hash if parent >= 0 else ROOT_HASH
        assert parent_hash is not None, "a page is opened only after its predecessor is sealed"
        pid = self.store.alloc_page()
        rec = PageRecord.opened(self.pages.cols, pid, parent, parent_hash, len(block), reader.session, reader.task,
                                reader.name, self.page_bytes)
        self.pages.add(rec)
        return rec

    def fresh_many(self, readers: list[ReaderRecord]) -> list[PageRecord]:
        """A fresh page id, its record and a GPU slot for each reader's next block, in order (inside a
        transaction; one undo for them all, ``_give_back``)."""
        opened: list[PageRecord] = []
        self.undo(lambda: self._give_back(opened))
        place, take = self.storage.place, self.storage.slots.take
        for reader in readers:
            rec = self.record(reader)
            opened.append(rec)
            place(rec, take(rec.pid), 0)
        return opened

    def link_many(self, readers: list[ReaderRecord], recs: list[PageRecord]) -> None:
        """Each opened page ends its reader's block table (and its tip) and continues its parent in the
        index (inside a transaction; one undo)."""
        linked: list[tuple[ReaderRecord, PageRecord]] = []
        self.undo(lambda: self._unlink_many(linked))
        point, add_child = self.tips.point, self.index.add_child
        for reader, rec in zip(readers, recs, strict=True):
            reader.block.append(rec.pid)
            point(reader.rid, rec)
            linked.append((reader, rec))
            add_child(rec.parent_hash, rec.pid, rec.token_ids, rec.parent)

    def _unlink_many(self, linked: list[tuple[ReaderRecord, PageRecord]]) -> None:
        for reader, rec in reversed(linked):
            self.index.remove_child(rec.parent_hash, rec.pid)
            self._unlink(reader.rid, reader.block)

    def _unlink(self, rid: int, block: list[int]) -> None:
        """Undo of a link: the page leaves the end of the block table, the tip back to the one before."""
        block.pop()
        self.tips.point(rid, self.pages.records[block[-1]] if block else None)

    def sealed_many(self, recs: list[PageRecord], rows: np.ndarray | None = None) -> None:
        """``WrittenPages.sealed_many`` (committed pages that took their last token)."""
        self.done.sealed_many(recs, rows)

def _setter(obj: object, name: str, value: object) -> Callable[[], None]:
    return lambda: setattr(obj, name, value)


_PID = attrgetter("pid")
