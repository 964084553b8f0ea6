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
        (``sealed_many``)."""
        seam, c = self.seam, self.C
        fresh = [rec for rec, fill, _, _ in pending if fill == 0 and not rec.token_ids]
        seam.writing(fresh)
        self.write_data(pending)
        sealed: list[PageRecord] = []
        rows: list[Any] | None = []  # the sealed pages' tokens, while every one is a uint64 array
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
        seam.written(fresh, list(dict.fromkeys(rec.pid for rec, _, _, _ in pending)))
        if sealed:
            self.sealed_many(sealed, None if rows is None else
                             np.frombuffer(b"".join(rows), dtype=np.uint64).reshape(len(sealed), c))

    def write_data(self, pending: list[Pending]) -> None:
        """The bytes of every run of ``pending`` to the data plane: one call over all their tokens when
        the store takes many (slot, block, offset, token) at once, else one call per page.  Pages that
        follow one another in one write (each the block after the one before, from its first token)
        are one run of positions::

            depth 3, fill 2, C = 4:   [ . . t0 t1 ] [ t2 t3 t4 t5 ] [ t6 ]      positions 14 .. 20
            block = position // C - 3 (the slot of each page), offset = position % C
        """
        many = getattr(self.storage.data, "write_tokens_many", None)
        total = sum(len(toks) for _, _, toks, _ in pending)
        if many is not None and len(pending) > 1 and total >= 32:
            chunks = [toks for _, _, toks, _ in pending]
            toks_all: np.ndarray | None = None
            if all(toks.__class__ is array and toks.typecode == "Q" for toks in chunks):  # type: ignore[attr-defined]
                toks_all = np.frombuffer(b"".join(chunks), dtype=np.uint64)  # type: ignore[arg-type]
            else:
                try:
                    toks_all = np.concatenate([np.array(toks, dtype=np.uint64) for toks in chunks])
                except OverflowError:
                    pass
            if toks_all is not None:
                c, (first, fill0, _, _) = self.C, pending[0]
                run = all(rec.depth == first.depth + i and (fill == 0 or not i)
                          for i, (rec, fill, _, _) in enumerate(pending))
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
                return
        write = self.storage.data.write_tokens
        for rec, fill, toks, _ in pending:
            write(rec.gpu_slot, rec.depth, fill, toks)

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
        self.seam.sealed_many(recs)  # the policy told of each, in order (nothing else told it between)
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
