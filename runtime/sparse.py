"""Per-(reader, page) state, sparse: reader -> {page: value}, an initial value absent.

::

    block      reader 0: {7: in, 12: in}      reader 3: {7: in}

``RPView`` lets both backends read a variable as ``arrays[x][(r, p)]`` (one pair, or index arrays).
Who holds a page (the reverse index) is in ``holders.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from .holders import MANY, Holders

EMPTY: dict[int, int] = {}
SHORT_ROW = 64  # a row in array form this short is read as a dict (made once), a longer one searched


def frozen(ids: np.ndarray | Sequence[int]) -> np.ndarray:
    """``ids`` as a read-only int64 array nobody else can change: itself when it is one already (it
    owns its data and is read-only: what this returns), else a copy made so.  One lease's pages are
    copied once and shared by its rows and the ``Lease``."""
    if ids.__class__ is np.ndarray and ids.dtype == np.int64 and ids.base is None and not ids.flags.writeable:
        return ids  # type: ignore[return-value]
    out = np.array(ids, dtype=np.int64)
    out.flags.writeable = False
    return out


class RPView:
    """One per-(reader, page) variable seen as ``arrays[x][(r, p)]`` by both backends.

    A reader's row lives in one of two forms::

        data[r]   {page: value}                       single writes, scalar reads
        rows[r]   (pages array, values array)         a whole row one batch wrote (the lease a lookup
                                                      took; the block table attach wrote)

    A row in ``only`` exists in array form alone (a batch wrote it fresh and nothing has asked for
    the dict since): a batch over the same pages (released, attached, detached by free) reads and
    rewrites it with array operations, never a dict operation a page; anything else builds the dict
    first (``materialize``).  A row in both forms is the same row; ``grown`` holds the entries single
    writes added after its arrays were taken (a page opened at the end of a block table).
    The state store keeps the forms in step on every write (``extend``, ``forget``)."""

    __slots__ = ("data", "init", "rows", "grown", "only", "holders", "other", "looked")

    def __init__(self, data: dict[int, dict[int, int]], init: int) -> None:
        self.data = data
        self.init = init
        self.rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.grown: dict[int, tuple[list[int], list[int]]] = {}
        self.only: set[int] = set()
        self.holders: Holders | None = None  # the reverse index, when a two-valued variable has one
        self.other = init  # its one value besides the initial
        self.looked: dict[int, dict[int, int]] = {}  # a short row's arrays as a dict, made by its first scalar read

    def two_valued(self, holders: Holders, other: int) -> None:
        """The variable takes only ``init`` and ``other``, and ``holders`` is its reverse index (kept by
        the state store on every write): an entry is ``other`` exactly where the index has its reader."""
        self.holders, self.other = holders, other

    def known(self, rid: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The reader's whole row as arrays, if kept."""
        row = self.rows.get(rid)
        more = self.grown.pop(rid, None)
        if row is not None and more is not None:
            pages = np.concatenate((row[0], np.asarray(more[0], dtype=np.int64)))
            values = np.concatenate((row[1], np.asarray(more[1], dtype=np.int64)))
            pages.flags.writeable = values.flags.writeable = False
            row = self.rows[rid] = (pages, values)
        return row

    def keep(self, rid: int, pages: np.ndarray, values: np.ndarray | int, only: bool) -> None:
        """Keep ``(pages, values)`` as the reader's whole row (``only``: and no dict for it)."""
        if isinstance(values, int):
            vals = np.full(len(pages), values, dtype=np.int64)
            vals.flags.writeable = False
        else:
            vals = frozen(values)
        self.rows[rid] = (frozen(pages), vals)  # arrays the caller cannot change
        self.grown.pop(rid, None)
        self.looked.pop(rid, None)
        if only:
            self.only.add(rid)
        else:
            self.only.discard(rid)

    def holds(self, rid: int, pid: int) -> bool:
        """Whether the reader's row, in array form, has an entry at ``pid``."""
        return rid in self.rows and self._search(rid, pid) != self.init

    def materialize(self, rid: int) -> dict[int, int] | None:
        """The reader's dict row, built from its arrays if it had none (None: no row)."""
        if rid in self.only:
            pages, values = self.known(rid)  # type: ignore[misc]
            self.data[rid] = dict(zip(pages.tolist(), values.tolist(), strict=True))
            self.only.discard(rid)
        return self.data.get(rid)

    def extend(self, rid: int, pid: int, value: int) -> None:
        """A single write added the entry ``pid`` (absent before) to the reader's row."""
        if rid in self.rows:
            more = self.grown.get(rid)
            if more is None:
                more = self.grown[rid] = ([], [])
            more[0].append(pid)
            more[1].append(value)
            looked = self.looked.get(rid)
            if looked is not None:
                looked[pid] = value

    def forget(self, rid: int) -> None:
        """The reader's dict row is about to change otherwise: its arrays are no longer known (built
        into the dict first if they were its only form)."""
        if rid in self.only:
            self.materialize(rid)
        self.rows.pop(rid, None)
        self.grown.pop(rid, None)
        self.looked.pop(rid, None)

    def drop(self, rid: int) -> None:
        """The reader's row went back to initial values everywhere."""
        self.rows.pop(rid, None)
        self.grown.pop(rid, None)
        self.looked.pop(rid, None)
        self.only.discard(rid)
        self.data.pop(rid, None)

    def __getitem__(self, key: tuple[Any, Any]) -> Any:
        r, p = key
        if p.__class__ is int and r.__class__ is int:  # one pair (a generated plan's read): the dict row first
            row = self.data.get(r)
            if row:
                return row.get(p, self.init)
        elif isinstance(r, np.ndarray) or isinstance(p, np.ndarray):
            return self.gather(r, p)
        row = self.data.get(r)
        if row is None and self.only and r in self.only:
            more = self.grown.get(r)
            if more is None or len(more[0]) < 8:  # a few reads: searched in the arrays, no dict built
                return self._search(r, p)
            row = self.materialize(r)
        return row.get(p, self.init) if row else self.init

    def _search(self, rid: int, pid: int) -> int:
        """The row's value at ``pid`` read off its arrays: a short row's made into a dict at its first read
        (kept until the row changes; no ``data`` entry, so the row stays in array form), a long one's
        searched."""
        looked = self.looked.get(rid)
        if looked is not None:
            return looked.get(pid, self.init)
        pages, values = self.rows[rid]
        if len(pages) <= SHORT_ROW:
            looked = self.looked[rid] = dict(zip(pages.tolist(), values.tolist(), strict=True))
            more = self.grown.get(rid)
            if more is not None:
                looked.update(zip(more[0], more[1], strict=True))
            return looked.get(pid, self.init)
        at = np.flatnonzero(pages == pid)
        if len(at):
            return int(values[at[0]])
        more = self.grown.get(rid)
        if more is not None and pid in more[0]:
            return more[1][more[0].index(pid)]
        return self.init

    def gather(self, r: Any, p: Any) -> np.ndarray:
        """Values at broadcast index arrays ``r`` and ``p``."""
        if p.__class__ is np.ndarray and p.ndim == 1 and not isinstance(r, np.ndarray):  # one reader's pages
            rid = int(r)
            if rid in self.rows:
                known = self.known(rid)
                assert known is not None
                if known[0] is p or (len(known[0]) == len(p) and np.array_equal(known[0], p)):
                    return known[1]
            row = self.data.get(rid)
            if row is None and rid in self.only:
                row = self.materialize(rid)
            if not row:  # a fresh reader's row: every value initial (zeros: one call in C)
                return np.zeros(len(p), dtype=np.int64) if self.init == 0 else np.full(len(p), self.init, np.int64)
            return np.fromiter(map(row.get, p.tolist(), repeat(self.init)), dtype=np.int64, count=len(p))
        if r.__class__ is np.ndarray and p.__class__ is np.ndarray and r.ndim == 1 and r.shape == p.shape \
                and len(r) > 8 and r[0] != r[-1]:  # many readers, a page each (a decode step): a pass per pair
            if self.holders is not None:
                return self._gather_held(r, p)
            readers = r.tolist()
            if self.only:
                for rid in self.only.intersection(readers):
                    self.materialize(rid)
            rows = map(self.data.get, readers, repeat(EMPTY))
            return np.fromiter(map(dict.get, rows, p.tolist(), repeat(self.init)), dtype=np.int64, count=len(r))
        rr, pp = np.broadcast_arrays(np.asarray(r, dtype=np.int64), np.asarray(p, dtype=np.int64))
        out = np.full(rr.shape, self.init, dtype=np.int64)
        if self.only:
            for rid in self.only & set(np.unique(rr).tolist()):
                self.materialize(rid)
        if not self.data or not out.size:
            return out
        flat_r, flat_p, flat = rr.reshape(-1), pp.reshape(-1), out.reshape(-1)
        one = bool(flat_r.size) and flat_r[0] == flat_r[-1] and bool((flat_r == flat_r[0]).all())
        if not one and flat_r.size > 8:  # many readers (a decode step): one lookup per pair
            rows = map(self.data.get, flat_r.tolist(), repeat(EMPTY))  # one C-level pass per pair
            flat[:] = list(map(dict.get, rows, flat_p.tolist(), repeat(self.init)))
            return out
        readers = [int(flat_r[0])] if one else np.unique(flat_r).tolist()
        for reader in readers:
            row = self.data.get(reader)
            if not row:
                continue
            sel = slice(None) if len(readers) == 1 else np.flatnonzero(flat_r == reader)
            pages = flat_p[sel].tolist()
            try:
                values = itemgetter(*pages)(row) if len(pages) > 1 else (row[pages[0]],)
            except KeyError:
                get, init = row.get, self.init
                values = [get(q, init) for q in pages]
            flat[sel] = values
        return out

    def _gather_held(self, r: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Values at pairs ``(r[i], p[i])`` read off the reverse index (a two-valued variable): the
        page's one holder compared at once, the pages several readers hold looked up in their sets."""
        holders = self.holders
        assert holders is not None
        one = holders.vec[p]
        out = np.where(one == r, self.other, self.init)
        shared = np.flatnonzero(one == MANY)
        if len(shared):
            many = holders.many
            for i, rid, pid in zip(shared.tolist(), r[shared].tolist(), p[shared].tolist(), strict=True):
                if rid in many[pid]:
                    out[i] = self.other
        return out
