"""The page each reader is writing: the last page of its block table, its GPU slot, its record and the
record's token list, in reader-indexed columns, so that a decode step reads them for every sequence
with one array index instead of a pass over the readers' block tables and the page records.

::

    reader     block table        page   slot   record           tokens
    #0         [7, 12, 31]        31     5      PageRecord 31    PageRecord 31's list
    #1         []                 -1     -1     None             None
    #2         [7, 40]            40     9      PageRecord 40    PageRecord 40's list

Kept by whoever changes a block table (``PageWriter.link``, whose undo points the tip back at the
page before, ``Sequences.attach`` and ``free``), so a transaction rolled back restores it.  The slot
is the one the page had when it joined the table: a page still filling never leaves the GPU
(``offload`` and ``drop`` need a sealed tail), so the slot of a filling page, the only kind a decode
step writes into, is current.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .pages import PageRecord


class Tips:
    """``page``, ``slot``, ``record`` and ``tokens`` of every reader's last block (-1, -1, None, None: an
    empty table)."""

    def __init__(self, capacity: int = 16) -> None:
        self.page = np.full(capacity, -1, dtype=np.int64)
        self.slot = np.full(capacity, -1, dtype=np.int64)
        self.record = np.full(capacity, None, dtype=object)
        self.tokens = np.full(capacity, None, dtype=object)  # the record's token list (the same object)

    def ensure(self, rid: int) -> None:
        """Rows for reader ids up to ``rid``."""
        size = len(self.page)
        if rid < size:
            return
        new = max(2 * size, rid + 1)
        page = np.full(new, -1, dtype=np.int64)
        slot = np.full(new, -1, dtype=np.int64)
        record = np.full(new, None, dtype=object)
        tokens = np.full(new, None, dtype=object)
        page[:size], slot[:size], record[:size], tokens[:size] = self.page, self.slot, self.record, self.tokens
        self.page, self.slot, self.record, self.tokens = page, slot, record, tokens

    def set(self, rid: int, rec: PageRecord | None) -> Callable[[], None]:
        """Reader ``rid``'s block table now ends with ``rec`` (None: it is empty); returns what undoes it."""
        self.ensure(rid)
        old = (int(self.page[rid]), int(self.slot[rid]), self.record[rid], self.tokens[rid])
        self.point(rid, rec)

        def undo() -> None:
            self.page[rid], self.slot[rid], self.record[rid], self.tokens[rid] = old

        return undo

    def point(self, rid: int, rec: PageRecord | None) -> None:
        """``set`` without its undo (for a caller whose own undo points the tip back)."""
        self.ensure(rid)
        if rec is None:
            self.page[rid], self.slot[rid], self.record[rid], self.tokens[rid] = -1, -1, None, None
        else:
            self.page[rid], self.slot[rid], self.record[rid] = rec.pid, rec.gpu_slot, rec
            self.tokens[rid] = rec.token_ids

    def mismatches(self, tables: dict[int, list[int]], slot_of: Callable[[int], int]) -> list[str]:
        """What disagrees with the block tables ``tables`` (reader id -> its pages) and, for a last page
        still filling, whose slot ``slot_of`` gives (-1: not filling: not compared)."""
        out = []
        for rid, block in tables.items():
            want = block[-1] if block else -1
            have = int(self.page[rid]) if rid < len(self.page) else -1
            if have != want:
                out.append(f"reader #{rid}: last block {want}, tip column {have}")
            elif want >= 0 and (self.record[rid] is None or self.record[rid].pid != want
                                or self.tokens[rid] is not self.record[rid].token_ids
                                and self.record[rid].token_ids.__class__ is list):  # sealed: a tuple now
                out.append(f"reader #{rid}: last block {want}, its record or token list not in the tip columns")
            elif want >= 0:
                slot = slot_of(want)
                if slot >= 0 and slot != int(self.slot[rid]):
                    out.append(f"reader #{rid}: page {want} in GPU slot {slot}, tip column {int(self.slot[rid])}")
        return out
