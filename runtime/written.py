"""What follows a write's commit, in bulk over the pages it wrote: the policy told, the bytes to the
data plane, the tokens to the records, the sealed pages into the index and their morphology proposed.

::

    pending     (records, fill, tokens, kinds) for each write of the transaction: the pages it touched
                in block order, the first one's fill before it (0: the write opened it, as it opened
                every later one), the tokens and their kinds
    policy      the fresh pages inserted and held, one tick, every page accessed
    bytes       one data-plane call over all the tokens (a run of positions)
    records     a page written whole keeps its tokens as the tuple a sealed page holds
    sealed      rows of tokens and chain classes stored as arrays, hashes indexed, then compress,
                index and admit proposed (batches over them)

A write's pages are one run of positions, each the block after the one before (C = 4)::

    fill 2, 7 tokens:   [ 4 5 | t0 t1 ] [ t2 t3 t4 t5 ] [ t6 ]      page j takes tokens[at_j : at_j + C - fill_j]
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from .config import RuntimeConfig
from .index import PrefixIndex
from .morphology import Morphology
from .pages import PageDirectory, PageRecord
from .seam import PolicySeam
from .tiers import Storage

Pending = tuple[list[PageRecord], int, Sequence[int], list[str | None] | None]


class WrittenPages:
    """The bulk work after a write commits (``PageWriter.transaction``)."""

    def __init__(self, pages: PageDirectory, index: PrefixIndex, storage: Storage, morph: Morphology,
                 seam: PolicySeam, config: RuntimeConfig) -> None:
        self.pages, self.index, self.storage, self.morph, self.seam = pages, index, storage, morph, seam
        self.config = config
        self.C = config.page_size
        self.bulk = True  # sealed rows stored as one array (False: page by page)

    def written(self, pending: list[Pending], data: bool = True) -> None:
        """After commit, for every page the transaction wrote, in bulk: the policy told of the fresh ones
        and of every write (one tick), the bytes to the data plane (``data`` False: left to the caller,
        which writes them itself), the tokens to the records (a page written whole keeps them as the
        tuple a sealed page holds), then the pages it sealed hashed into the index (their rows of
        tokens one array) and their morphology proposed (``sealed_many``).  No page written (a
        register, free or capture): the one tick alone."""
        seam = self.seam
        if not pending:  # (``writing`` and ``written`` of no page: their tick and nothing else)
            seam.tick()
            return
        fresh: list[PageRecord] = []  # every page but a partial first one: each opened by its write
        pids: list[int] = []
        for recs, fill, _, _ in pending:
            fresh += recs[1:] if fill else recs
            pids += map(_PID, recs)
        seam.writing(fresh)
        if data:
            for write in pending:
                self.write_data(*write[:3])
        sealed: list[PageRecord] = []
        rows: list[Any] | None = []  # the sealed pages' tokens, while every one is a uint64 array
        for write in pending:
            rows = self._took(*write, sealed, rows)
        # one write's pages are distinct; several writes' may share one (a write continues another's page)
        seam.written(fresh, pids if len(pending) == 1 or len(pids) == len(set(pids)) else list(dict.fromkeys(pids)))
        if sealed:
            self.sealed_many(sealed, None if rows is None else
                             np.frombuffer(b"".join(rows), dtype=np.uint64).reshape(len(sealed), self.C))

    def _took(self, recs: list[PageRecord], fill: int, tokens: Sequence[int], kinds: list[str | None] | None,
              sealed: list[PageRecord], rows: list[Any] | None) -> list[Any] | None:
        """One write's pages take its tokens, in block order: the partial page it continues, the pages it
        wrote whole (each its tuple, cut from one list of the tokens), the page it left filling.  Those
        it sealed go to ``sealed``, their tokens to ``rows`` (the whole pages' as one slice; None once
        one is not a uint64 array)."""
        c, n = self.C, len(tokens)
        at, rest = 0, recs
        if fill:
            first, rest = recs[0], recs[1:]
            at = min(c - fill, n)
            first.tokens = first.extend(tokens[:at])
            if first.tokens == c:
                sealed.append(first)
                if rows is not None:
                    rows.append(array("Q", first.token_ids))
        whole = (n - at) // c
        if whole:
            part = tokens[at:at + whole * c]
            packed = part.__class__ is array and part.typecode == "Q"  # type: ignore[attr-defined]
            ids = part.tolist() if packed else list(part)  # type: ignore[attr-defined]
            done = rest[:whole]
            pages = zip(*[iter(ids)] * c, strict=True)  # C tokens at a time: the tuple a sealed page keeps
            for rec, toks in zip(done, pages, strict=True):
                rec.token_ids = toks
                rec.tokens = c
            sealed += done
            if rows is not None and packed:
                rows.append(part)
            else:
                rows = None
        if at + whole * c < n:  # the page it leaves filling
            last = rest[whole]
            last.tokens = last.extend(tokens[at + whole * c:])
        if kinds is not None:
            self._typed(recs, fill, kinds)
        return rows

    def _typed(self, recs: list[PageRecord], fill: int, kinds: list[str | None]) -> None:
        """Each page's types joined by the kinds of the tokens it took."""
        for rec, _, at, end in _spans(recs, fill, len(kinds), self.C):
            part = kinds[at:end]
            if any(part):
                rec.types = rec.types | {k for k in part if k}

    def write_data(self, recs: list[PageRecord], fill: int, tokens: Sequence[int]) -> None:
        """The bytes of one write to the data plane: ``tokens`` from offset ``fill`` of the first of
        ``recs`` on, each page the block after the one before (one run of positions).  A single page
        by ``write_tokens``; many by the store's ``write_run`` (16 tokens or more), else its
        ``write_tokens_many`` (32 or more), else page by page::

            depth 3, fill 2, C = 4:   [ . . t0 t1 ] [ t2 t3 t4 t5 ] [ t6 ]      positions 14 .. 20
            block = position // C - 3 (the slot of each page), offset = position % C
        """
        data, n = self.storage.data, len(tokens)
        if len(recs) > 1 and n >= 16:
            flat: np.ndarray | None = None
            if tokens.__class__ is array and tokens.typecode == "Q":  # type: ignore[attr-defined]
                flat = np.frombuffer(tokens, dtype=np.uint64)  # type: ignore[arg-type]
            else:
                try:
                    flat = np.array(tokens, dtype=np.uint64)
                except OverflowError:
                    pass
            first = recs[0]
            write_run = getattr(data, "write_run", None)
            if flat is not None and write_run is not None:
                write_run([rec.gpu_slot for rec in recs], first.depth, fill, flat)
                return
            many = getattr(data, "write_tokens_many", None)
            if flat is not None and many is not None and n >= 32:
                c = self.C
                slots = np.fromiter((rec.gpu_slot for rec in recs), dtype=np.int64, count=len(recs))
                pos = np.arange(first.depth * c + fill, first.depth * c + fill + n, dtype=np.int64)
                depths = pos // c
                many(slots[depths - first.depth], depths, pos - depths * c, flat)
                return
        write = data.write_tokens
        if len(recs) == 1:
            write(recs[0].gpu_slot, recs[0].depth, fill, tokens)
            return
        for rec, offset, at, end in _spans(recs, fill, n, self.C):
            write(rec.gpu_slot, rec.depth, offset, tokens[at:end])

    def sealed_many(self, recs: list[PageRecord], rows: np.ndarray | None = None) -> None:
        """Pages that took their last token (committed): their hashes into the index, then their
        morphology proposed, each proposal one batch over them (``Morphology.maintain_many``).
        ``rows``: their tokens as a (pages x C) array, when the caller has one."""
        pids = list(map(_PID, recs))
        if rows is None or len(recs) < 4 or not self.bulk:
            for i, rec in enumerate(recs):
                self._index_sealed(rec, None if rows is None else rows[i])
        else:  # their rows and classes stored as arrays, then each page's hash indexed
            c = self.C
            kept = self.index.seal_many(pids, [rec.parent for rec in recs], [rec.token_ids for rec in recs], rows,
                                        [rec.hash for rec in recs])  # type: ignore[misc]
            for rec, toks in zip(recs, kept, strict=True):
                rec.recovery_tokens = c * (rec.depth + 1)
                rec.token_ids = toks
        self.seam.sealed_many(recs)  # the policy told of each, in order (nothing else told it between)
        if self.config.auto_compress:
            self.morph.maintain_many(pids)
        elif self.config.auto_admit:
            for pid in pids:
                self.morph.admit(pid)

    def _index_sealed(self, rec: PageRecord, row: np.ndarray | None = None) -> None:
        assert rec.hash is not None
        rec.recovery_tokens = self.C * (rec.depth + 1)  # the record is its own PageMeta: hash set at the seal
        rec.token_ids = self.index.seal(rec.pid, rec.parent, rec.token_ids, row)
        self.index.add_sealed(rec.hash, rec.pid)


_PID = attrgetter("pid")


def _spans(recs: list[PageRecord], fill: int, n: int, c: int) -> Iterator[tuple[PageRecord, int, int, int]]:
    """Each page of one write of ``n`` tokens (the first filled to ``fill`` before it), with the offset it
    is written from and the slice ``[at, end)`` of the write's tokens it takes::

        fill 2, 7 tokens, C = 4:   (page 0, 2, 0, 2)  (page 1, 0, 2, 6)  (page 2, 0, 6, 7)
    """
    at = 0
    for rec in recs:
        end = min(at + c - fill, n)
        yield rec, fill, at, end
        at, fill = end, 0
