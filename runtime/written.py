"""What follows a write's commit, in bulk over the pages it wrote: the policy told, the bytes to the
data plane, the tokens to the records, the sealed pages into the index and their morphology proposed.

::

    pending     (record, fill, tokens, kinds) for each page the write touched, in block order
    policy      the fresh pages inserted and held, one tick, every page accessed
    bytes       one data-plane call over all the tokens (a run of positions)
    records     a page written whole keeps its tokens as the tuple a sealed page holds
    sealed      rows of tokens and chain classes stored as arrays, hashes indexed, then compress,
                index and admit proposed (batches over them)
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from .config import RuntimeConfig
from .index import PrefixIndex
from .morphology import Morphology
from .pages import PageDirectory, PageRecord
from .seam import PolicySeam
from .tiers import Storage

Pending = tuple[PageRecord, int, Sequence[int], list[str | None] | None]


class WrittenPages:
    """The bulk work after a write commits (``PageWriter.transaction``)."""

    def __init__(self, pages: PageDirectory, index: PrefixIndex, storage: Storage, morph: Morphology,
                 seam: PolicySeam, config: RuntimeConfig) -> None:
        self.pages, self.index, self.storage, self.morph, self.seam = pages, index, storage, morph, seam
        self.config = config
        self.C = config.page_size
        self.bulk = True  # sealed rows stored as one array (False: page by page)

    def written(self, pending: list[Pending]) -> None:
        """After commit, for every page the transaction wrote, in bulk: the policy told of the fresh ones
        and of every write (one tick), the bytes to the data plane, the tokens to the records (a page
        written whole keeps them as the tuple a sealed page holds), then the pages it sealed hashed
        into the index (their rows of tokens one array) and their morphology proposed
        (``sealed_many``).  One pass over ``pending`` finds the fresh pages, the sealed ones, their
        rows and whether the pages are one run of positions (``write_data``)."""
        if not pending:
            self.seam.writing([])
            self.seam.written([], [])
            return
        seam, c = self.seam, self.C
        fresh: list[PageRecord] = []
        pids: list[int] = []
        sealed: list[PageRecord] = []
        rows: list[Any] | None = []  # the sealed pages' tokens, while every one is a uint64 array
        first = pending[0][0]
        depth, run = first.depth, True  # each page the block after the one before, from its first token
        for rec, fill, _, _ in pending:
            pids.append(rec.pid)
            if fill == 0 and not rec.token_ids:
                fresh.append(rec)
            if run and (rec.depth != depth or fill and rec is not first):
                run = False
            depth += 1
        seam.writing(fresh)
        self.write_data(pending, run)
        for rec, fill, toks, kinds in pending:
            if fill == 0 and len(toks) == c:  # the whole page: sealed, its tokens the tuple it keeps
                rec.token_ids = tuple(toks)
                rec.tokens = c
            else:
                rec.tokens = rec.extend(toks)
            if kinds is not None and any(kinds):
                rec.types = rec.types | {k for k in kinds if k}
            if rec.tokens == c:
                sealed.append(rec)
                if rows is not None:
                    if fill == 0 and toks.__class__ is array and toks.typecode == "Q":  # type: ignore[attr-defined]
                        rows.append(toks)
                    elif fill:
                        rows.append(array("Q", rec.token_ids))
                    else:
                        rows = None
        seam.written(fresh, pids if len(pids) == len(set(pids)) else list(dict.fromkeys(pids)))
        if sealed:
            self.sealed_many(sealed, None if rows is None else
                             np.frombuffer(b"".join(rows), dtype=np.uint64).reshape(len(sealed), c))

    def write_data(self, pending: list[Pending], run: bool | None = None) -> None:
        """The bytes of every run of ``pending`` to the data plane: one call over all their tokens when
        the store takes many at once, else one call per page.  Pages that follow one another in one
        write (``run``: each the block after the one before, from its first token; found here when
        None) are one run of positions, written by the store's ``write_run`` when it has one::

            depth 3, fill 2, C = 4:   [ . . t0 t1 ] [ t2 t3 t4 t5 ] [ t6 ]      positions 14 .. 20
            block = position // C - 3 (the slot of each page), offset = position % C
        """
        data = self.storage.data
        if len(pending) > 1:
            first, fill0, _, _ = pending[0]
            if run is None:
                run = all(rec.depth == first.depth + i and (fill == 0 or not i)
                          for i, (rec, fill, _, _) in enumerate(pending))
            chunks = [toks for _, _, toks, _ in pending]
            many = getattr(data, "write_tokens_many", None)
            whole: Any = None  # every chunk's tokens as one uint64 array, when each is one already
            if all(toks.__class__ is array and toks.typecode == "Q" for toks in chunks):  # type: ignore[attr-defined]
                whole = b"".join(chunks)  # type: ignore[arg-type]
            total = sum(map(len, chunks))
            write_run = getattr(data, "write_run", None)
            if run and write_run is not None and whole is not None and total >= 16:  # (fewer: page by page)
                write_run([rec.gpu_slot for rec, _, _, _ in pending], first.depth, fill0,
                          np.frombuffer(whole, dtype=np.uint64))
                return
            if many is not None and total >= 32:
                toks_all: np.ndarray | None = None
                if whole is not None:
                    toks_all = np.frombuffer(whole, dtype=np.uint64)
                else:
                    try:
                        toks_all = np.concatenate([np.array(toks, dtype=np.uint64) for toks in chunks])
                    except OverflowError:
                        pass
                if toks_all is not None:
                    self._write_many(many, pending, chunks, toks_all, total, run)
                    return
        write = data.write_tokens
        for rec, fill, toks, _ in pending:
            write(rec.gpu_slot, rec.depth, fill, toks)

    def _write_many(self, many: Any, pending: list[Pending], chunks: list[Sequence[int]], toks_all: np.ndarray,
                    total: int, run: bool) -> None:
        """``write_data`` through ``write_tokens_many``: (slot, block, offset, token) of every token."""
        c, (first, fill0, _, _) = self.C, pending[0]
        slots = np.fromiter((rec.gpu_slot for rec, _, _, _ in pending), dtype=np.int64, count=len(pending))
        if run:
            pos = np.arange(first.depth * c + fill0, first.depth * c + fill0 + total, dtype=np.int64)
            depths = pos // c
            many(slots[depths - first.depth], depths, pos - depths * c, toks_all)
            return
        counts = np.fromiter((len(toks) for toks in chunks), dtype=np.int64, count=len(pending))
        ends = np.cumsum(counts)
        within = np.arange(total, dtype=np.int64) - np.repeat(ends - counts, counts)
        fills = np.fromiter((fill for _, fill, _, _ in pending), dtype=np.int64, count=len(pending))
        depths = np.fromiter((rec.depth for rec, _, _, _ in pending), dtype=np.int64, count=len(pending))
        many(np.repeat(slots, counts), np.repeat(depths, counts), np.repeat(fills, counts) + within, toks_all)

    def sealed_many(self, recs: list[PageRecord], rows: np.ndarray | None = None) -> None:
        """Pages that took their last token (committed): their hashes into the index, then their
        morphology proposed, each proposal one batch over them (``Morphology.maintain_many``).
        ``rows``: their tokens as a (pages x C) array, when the caller has one."""
        if rows is None or len(recs) < 4 or not self.bulk:
            for i, rec in enumerate(recs):
                self._index_sealed(rec, None if rows is None else rows[i])
        else:  # their rows and classes stored as arrays, then each page's hash indexed
            c, pids = self.C, list(map(_PID, recs))
            kept = self.index.seal_many(pids, [rec.parent for rec in recs], [rec.token_ids for rec in recs], rows)
            for rec, toks in zip(recs, kept, strict=True):
                rec.recovery_tokens = c * (rec.depth + 1)
                rec.token_ids = toks
            self.index.add_sealed_many([rec.hash for rec in recs], pids)  # type: ignore[misc]
        self.seam.updated_many(recs)  # the policy told of each, in order (nothing else told it between)
        pids = list(map(_PID, recs))
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
