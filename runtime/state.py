"""The state store: the spec's design state of every page and reader, by column, and nothing else.

::

    page columns      tail  tier  pin  gen ...     one int64 per page id     array.array + numpy view
    reader columns    seq  graph  frontier ...     one int64 per reader id   (same memory, two handles)
    reader x page     block  lease  lpin  lgen ... sparse: reader -> {page: value}, initial values absent

States are integer codes (``CompiledSpec.codes``), booleans 0/1.  A free page id or reader id holds
the initial values, so the store read as a whole is a valid spec state whose unused ids are untouched.
Scalar reads go through the ``array.array`` handles (Python ints, fast), batch reads and writes
through the numpy views of the same memory.  Ghost variables are not kept: they are what is
physically so, and the runtime never reads them.

Writes are journaled inside a transaction (``begin``/``commit``/``rollback``): a call made of several
spec events either completes or leaves every value as it found it.  (Longer than most modules: the
write paths and the rollback that undoes them belong side by side.)
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import repeat
from typing import Any

import numpy as np

from .compiler import CompiledSpec
from .holders import Holders
from .sparse import EMPTY, RPView


class StateStore:
    """Columns of design state, sparse per-(reader, page) entries, page and reader ids."""

    def __init__(self, cspec: CompiledSpec, page_capacity: int = 64, reader_capacity: int = 16) -> None:
        self.cspec = cspec
        self.init = dict(cspec.init)
        self.page_names = cspec.page_names
        self.reader_names = cspec.reader_names
        self.rp_names = cspec.rp_names
        self.cols: dict[str, Any] = {}  # page name -> array.array('q')
        self.vecs: dict[str, np.ndarray] = {}  # page name -> numpy view
        self.rcols: dict[str, Any] = {}
        self.rvecs: dict[str, np.ndarray] = {}
        self.rp: dict[str, dict[int, dict[int, int]]] = {name: {} for name in self.rp_names}
        # page -> the readers with an entry there: one reader id, or a set of two or more
        self.rev: dict[str, Holders] = {name: Holders(page_capacity) for name in cspec.reverse_indexed}
        self.page_cap = 0
        self.reader_cap = 0
        self.live_pages: dict[int, None] = {}
        self.live_readers: dict[int, None] = {}
        self.free_page_ids: list[int] = []
        self.free_reader_ids: list[int] = []
        self.next_page = 0
        self.next_reader = 0
        self.arrays: dict[str, Any] = {}  # the closure backend's view
        self.varrays: dict[str, Any] = {}  # the vector backend's view
        self.views: dict[str, RPView] = {}
        for name in self.rp_names:
            view = RPView(self.rp[name], int(self.init[name]))
            self.arrays[name] = self.varrays[name] = self.views[name] = view
            codes = cspec.codes.get(name)
            if name in self.rev and codes is not None and len(codes) == 2:  # a two-state object
                view.two_valued(self.rev[name], next(c for c in codes.values() if c != view.init))
        # name -> its rows, view, initial value and reverse index (None if none): what ``set_rp`` reads
        self._rp_parts = {name: (self.rp[name], self.views[name], int(self.init[name]), self.rev.get(name))
                          for name in self.rp_names}
        self._scopes: list[dict[str, Any]] = []  # generated plans' globals that name columns (plancompile.py)
        self._grow_pages(page_capacity)
        self._grow_readers(reader_capacity)
        self.journal: list[tuple[Any, ...]] | None = None
        self.depth = 0

    # -- capacity ---------------------------------------------------------------------------------
    def _grow(self, names: tuple[str, ...], cols: dict[str, Any], vecs: dict[str, np.ndarray], old: int,
              new: int, kind: str) -> None:
        for name in names:
            fresh = array("q", bytes(8 * new))
            view = np.frombuffer(fresh, dtype=np.int64)
            if old:
                view[:old] = vecs[name][:old]
            view[old:] = int(self.init[name])
            cols[name] = fresh
            vecs[name] = view
            self.arrays[name] = fresh
            self.varrays[name] = view
            key = f"{'C' if kind == 'page' else 'R'}_{name}"
            for scope in self._scopes:
                if key in scope:
                    scope[key] = fresh

    def _grow_pages(self, new: int) -> None:
        self._grow(self.page_names, self.cols, self.vecs, self.page_cap, new, "page")
        for holders in self.rev.values():
            holders.grow(new)
        self.page_cap = new

    def _grow_readers(self, new: int) -> None:
        self._grow(self.reader_names, self.rcols, self.rvecs, self.reader_cap, new, "reader")
        self.reader_cap = new

    def bind_columns(self, scope: dict[str, Any]) -> None:
        """Keep the columns ``scope`` names (``C_<page name>``, ``R_<reader name>``: a generated plan's
        globals) current: a growth replaces a column, and with it theirs."""
        self._scopes.append(scope)

    # -- ids --------------------------------------------------------------------------------------
    def alloc_page(self) -> int:
        """A page id whose every value is initial (an untouched page of the spec)."""
        if self.free_page_ids:
            pid = self.free_page_ids.pop()
        else:
            pid = self.next_page
            self.next_page += 1
            if pid >= self.page_cap:
                self._grow_pages(max(2 * self.page_cap, 64))
        self.live_pages[pid] = None
        if self.journal is not None:
            self.journal.append(("alloc_page", pid))
        return pid

    def alloc_pages(self, count: int) -> list[int]:
        """``count`` page ids, the ones ``alloc_page`` called that many times gives, in that order (the
        same capacity and journal entries)."""
        free = self.free_page_ids
        reused = min(count, len(free))
        pids = free[len(free) - reused:][::-1]
        del free[len(free) - reused:]
        if count > reused:
            start = self.next_page
            self.next_page = start + count - reused
            pids += range(start, self.next_page)
            cap = self.page_cap
            while self.next_page > cap:  # each growth a single allocation past the capacity makes
                cap = max(2 * cap, 64)
            if cap > self.page_cap:
                self._grow_pages(cap)
        self.live_pages.update(dict.fromkeys(pids))
        if self.journal is not None:
            self.journal += [("alloc_page", pid) for pid in pids]
        return pids

    def free_page(self, pid: int) -> None:
        """Give a page id back; its page values must be initial (the spec's ``forget`` made them so)."""
        del self.live_pages[pid]
        self.free_page_ids.append(pid)
        if self.journal is not None:
            self.journal.append(("free_page", pid))

    def alloc_reader(self) -> int:
        """A reader id whose every value is initial."""
        if self.free_reader_ids:
            rid = self.free_reader_ids.pop()
        else:
            rid = self.next_reader
            self.next_reader += 1
            if rid >= self.reader_cap:
                self._grow_readers(max(2 * self.reader_cap, 16))
        self.live_readers[rid] = None
        if self.journal is not None:
            self.journal.append(("alloc_reader", rid))
        return rid

    def free_reader(self, rid: int) -> None:
        """Retire a reader: its per-(reader, page) entries and reader values go back to initial."""
        for name in self.rp_names:
            row = self.views[name].materialize(rid)
            if row:
                pids = list(row)
                self.set_rp_row(name, rid, pids, [self.init[name]] * len(pids))
            self.rp[name].pop(rid, None)
        for name in self.reader_names:
            if self.rcols[name][rid] != self.init[name]:
                self.set_reader(name, rid, self.init[name])
        del self.live_readers[rid]
        self.free_reader_ids.append(rid)
        if self.journal is not None:
            self.journal.append(("free_reader", rid))

    # -- reads ------------------------------------------------------------------------------------
    def page(self, name: str, pid: int) -> int:
        """One page value."""
        return int(self.cols[name][pid])

    def reader(self, name: str, rid: int) -> int:
        """One reader value."""
        return int(self.rcols[name][rid])

    def rp_value(self, name: str, rid: int, pid: int) -> int:
        """One per-(reader, page) value."""
        row = self.rp[name].get(rid) or self.views[name].materialize(rid)
        return row.get(pid, self.init[name]) if row else int(self.init[name])

    def rp_row(self, name: str, rid: int) -> dict[int, int]:
        """The reader's non-initial entries of ``name``, by page (do not modify)."""
        return self.rp[name].get(rid) or self.views[name].materialize(rid) or EMPTY

    def rp_has(self, name: str, rid: int, pid: int) -> bool:
        """Whether the reader has a non-initial entry of ``name`` at ``pid`` (read as the backends read
        it: a row in array form is searched while few single writes have grown it)."""
        view = self.views[name]
        return bool(view[(rid, pid)] != view.init)

    def has_rp(self, name: str, rid: int) -> bool:
        """Whether the reader has any non-initial entry of ``name``."""
        return bool(self.rp[name].get(rid)) or rid in self.views[name].only

    def rp_table(self, name: str) -> dict[int, dict[int, int]]:
        """Every reader's non-initial entries of ``name`` (do not modify)."""
        view = self.views[name]
        for rid in list(view.only):
            view.materialize(rid)
        return self.rp[name]

    def readers_at(self, names: Iterable[str], pid: int) -> set[int]:
        """Readers with a non-initial entry of any of ``names`` at page ``pid``."""
        out: set[int] = set()
        for name in names:
            rev = self.rev.get(name)
            if rev is not None:
                found = rev.get(pid)
                if found is not None:
                    out |= {found} if found.__class__ is int else found
            else:
                out.update(r for r, row in self.rp_table(name).items() if pid in row)
        return out

    def pages_of(self, names: Iterable[str], rid: int) -> Iterator[int]:
        """Pages where reader ``rid`` has a non-initial entry of any of ``names``."""
        names = tuple(names)
        if len(names) == 1:
            view = self.views[names[0]]
            if rid in view.only:  # the row's pages, from its arrays (those added after them too)
                return iter(self.pages_array(names, rid).tolist())
            return iter(list(self.rp_row(names[0], rid)))
        seen: dict[int, None] = {}
        for name in names:
            seen.update(dict.fromkeys(self.rp_row(name, rid)))
        return iter(list(seen))

    def in_array_form(self, names: tuple[str, ...], rid: int) -> bool:
        """Whether ``pages_array`` gives the reader's pages of ``names`` without making an array."""
        return len(names) == 1 and rid in self.views[names[0]].rows

    def pages_array(self, names: tuple[str, ...], rid: int) -> np.ndarray:
        """``pages_of`` as an array (a row in array form gives its pages without a dict)."""
        if len(names) == 1 and rid in self.views[names[0]].rows:
            known = self.views[names[0]].known(rid)
            assert known is not None
            return known[0]
        pages = list(self.pages_of(names, rid))
        return np.fromiter(pages, dtype=np.int64, count=len(pages))

    # -- writes -----------------------------------------------------------------------------------
    def set_page(self, name: str, pid: int, value: Any) -> None:
        """Set one page value."""
        col = self.cols[name]
        if self.journal is not None:
            self.journal.append(("p", name, pid, col[pid]))
        col[pid] = value

    def set_pages(self, name: str, pids: np.ndarray, values: Any) -> None:
        """Set a page value at many distinct pages."""
        vec = self.vecs[name]
        if self.journal is not None:
            self.journal.append(("P", name, pids.copy(), vec[pids]))  # (a fancy index copies)
        vec[pids] = values

    def set_reader(self, name: str, rid: int, value: Any) -> None:
        """Set one reader value."""
        col = self.rcols[name]
        if self.journal is not None:
            self.journal.append(("r", name, rid, col[rid]))
        col[rid] = value

    def set_readers(self, name: str, rids: np.ndarray, values: Any) -> None:
        """Set a reader value at many distinct readers."""
        vec = self.rvecs[name]
        if self.journal is not None:
            self.journal.append(("R", name, rids.copy(), vec[rids]))  # (a fancy index copies)
        vec[rids] = values

    def set_rp(self, name: str, rid: int, pid: int, value: Any) -> None:
        """Set one per-(reader, page) value (an initial value removes the entry)."""
        table, view, init, rev = self._rp_parts[name]
        row = table.get(rid)
        if row is not None and pid not in row and value != init and rid not in view.only and (
                view.holders is None or value == view.other):  # an entry added to a dict row (an open's)
            if self.journal is not None:
                self.journal.append(("rp", name, rid, pid, init))
            if rid in view.rows:  # a row in array form grows (``RPView.extend`` does nothing otherwise)
                view.extend(rid, pid, value)
            row[pid] = value
            if rev is not None:
                rev.hold(pid, rid)
            return
        if view.holders is not None and value != init and value != view.other:
            view.holders = None  # a third value: read from the rows from now on
        if rid in view.only and value != init and not view.holds(rid, pid):  # a page added to a row in
            if self.journal is not None:                                      # array form: it stays so
                self.journal.append(("rp", name, rid, pid, init))
            view.extend(rid, pid, value)
            if rev is not None:
                rev.hold(pid, rid)
            return
        row = table.get(rid) or view.materialize(rid)
        old = row.get(pid, init) if row else init
        if old == value:
            return
        if self.journal is not None:
            self.journal.append(("rp", name, rid, pid, old))
        if old == init and value != init:
            if rid in view.rows:  # a row in array form grows (``RPView.extend`` does nothing otherwise)
                view.extend(rid, pid, value)
        else:
            view.forget(rid)
        if value == init:
            del row[pid]  # type: ignore[union-attr]
            if not row:
                del table[rid]
        else:
            if row is None:
                row = table[rid] = {}
            row[pid] = value
        if rev is not None:
            if value == init:
                rev.unhold(pid, rid)
            elif old == init:
                rev.hold(pid, rid)

    def set_rp_row(self, name: str, rid: int, pids: list[int] | np.ndarray,
                   values: list[int] | np.ndarray | int) -> None:
        """Set ``name`` of reader ``rid`` at many distinct pages (``values``: one per page, or one for all).
        A row written whole (fresh, or exactly the pages of its array form) with no initial value left
        stays in array form alone (``RPView``): no dict operation a page."""
        init = self.init[name]
        view = self.views[name]
        table = self.rp[name]
        n = len(pids)
        if view.holders is not None and not _two_valued(values, init, view.other):
            view.holders = None  # a third value: read from the rows from now on
        lazy = rid in view.only
        found = table.get(rid)
        known = view.known(rid) if rid in view.rows else None
        olds: np.ndarray | None = None  # the row's values before, where known at once (whole)
        fresh = not found and not lazy
        whole = fresh
        if fresh:  # every value before is initial: ``olds`` made only where read
            if isinstance(values, int) and values == init:
                return  # every entry is initial already: nothing written, nothing to undo
        elif known is not None and (known[0] is pids or len(known[0]) == n and np.array_equal(known[0], pids)):
            olds, whole = known[1], True  # the row is exactly these pages: its values, at once
        if isinstance(values, int):
            cleared = values == init
            kept = not cleared
        elif isinstance(values, np.ndarray):
            set_ = values != init
            cleared, kept = not set_.any(), bool(set_.all())
        else:
            cleared, kept = values.count(init) == n, init not in values
        if whole and (cleared or kept):  # the whole row: arrays only, or nothing left
            if self.journal is not None:
                self.journal.append(("RP", name, rid, pids, np.full(n, init, dtype=np.int64) if olds is None else olds))
            view.drop(rid)
            if not cleared:
                view.keep(rid, np.asarray(pids, dtype=np.int64), values if isinstance(values, int)
                          else np.asarray(values, dtype=np.int64), only=True)
            rev = self.rev.get(name)
            if rev is not None and fresh != cleared:  # a row's arrays hold no initial value: all or none
                page_ids = np.asarray(pids, dtype=np.int64)     # of its pages change holder
                (rev.hold_many if fresh else rev.unhold_many)(page_ids, rid)
            return
        view.forget(rid)
        row: dict[int, int] = table.setdefault(rid, {})
        pid_list = pids.tolist() if isinstance(pids, np.ndarray) else pids
        old_list = None if not whole else [init] * n if olds is None else olds.tolist()
        if isinstance(values, int):
            self._write_row_same(name, rid, row, pid_list, values, init, old_list)
        else:
            self._write_row(name, rid, row, pid_list, values.tolist() if isinstance(values, np.ndarray) else values,
                            init, old_list)
        if not row:
            del table[rid]

    def _write_row(self, name: str, rid: int, row: dict[int, int], pids: list[int], values: list[int], init: int,
                   olds: list[int] | None) -> None:
        if olds is None:
            olds = list(map(row.get, pids, repeat(init)))
        if self.journal is not None:
            self.journal.append(("RP", name, rid, pids, olds))
        if init in values:
            if len(row) == len(pids) and values.count(init) == len(values) and all(map(row.__contains__, pids)):
                row.clear()  # the whole row goes back to initial (a lease released, a block table emptied)
            else:
                for pid, value in zip(pids, values, strict=True):
                    if value == init:
                        row.pop(pid, None)
                    else:
                        row[pid] = value
        else:
            row.update(zip(pids, values, strict=True))
        rev = self.rev.get(name)
        if rev is not None:
            rev.reindex(rid, pids, olds, values, init)

    def _write_row_same(self, name: str, rid: int, row: dict[int, int], pids: list[int], value: int, init: int,
                        olds: list[int] | None) -> None:
        rev = self.rev.get(name)
        if olds is None and (self.journal is not None or rev is not None):  # needed to undo or to reindex
            olds = list(map(row.get, pids, repeat(init)))
        if self.journal is not None:
            self.journal.append(("RP", name, rid, pids, olds))
        if value != init:
            row.update(dict.fromkeys(pids, value))
        elif len(row) == len(pids) and all(map(row.__contains__, pids)):
            row.clear()
        else:
            deque(map(row.pop, pids, repeat(None)), maxlen=0)
        if rev is not None:
            rev.reindex(rid, pids, olds or [], value, init)

    # -- transactions -----------------------------------------------------------------------------
    def begin(self) -> int:
        """Start (or nest) a transaction; returns the savepoint to roll back to."""
        if self.journal is None:
            self.journal = []
        self.depth += 1
        return len(self.journal)

    def commit(self) -> None:
        """End the innermost transaction, keeping its writes."""
        self.depth -= 1
        if self.depth == 0:
            self.journal = None

    def rollback(self, savepoint: int) -> list[tuple[str, str, Any]]:
        """Undo every write since ``savepoint`` (newest first) and end the innermost transaction;
        returns what was restored as ``(kind, name, index)``."""
        assert self.journal is not None
        undo = self.journal[savepoint:]
        del self.journal[savepoint:]
        keep, self.journal = self.journal, None  # undo without journaling
        restored: list[tuple[str, str, Any]] = []
        for entry in reversed(undo):
            kind = entry[0]
            if kind == "p":
                self.cols[entry[1]][entry[2]] = entry[3]
                restored.append(("page", entry[1], entry[2]))
            elif kind == "P":
                self.vecs[entry[1]][entry[2]] = entry[3]
                restored.append(("pages", entry[1], entry[2]))
            elif kind == "r":
                self.rcols[entry[1]][entry[2]] = entry[3]
                restored.append(("reader", entry[1], entry[2]))
            elif kind == "R":
                self.rvecs[entry[1]][entry[2]] = entry[3]
                restored.append(("readers", entry[1], entry[2]))
            elif kind == "rp":
                self.set_rp(entry[1], entry[2], entry[3], entry[4])
                restored.append(("rp", entry[1], (entry[2], entry[3])))
            elif kind == "RP":
                self.set_rp_row(entry[1], entry[2], entry[3], entry[4])
                restored.append(("rp", entry[1], (entry[2], np.asarray(entry[3], dtype=np.int64))))
            elif kind == "alloc_page":
                del self.live_pages[entry[1]]
                self.free_page_ids.append(entry[1])
            elif kind == "free_page":
                self.free_page_ids.remove(entry[1])
                self.live_pages[entry[1]] = None
            elif kind == "alloc_reader":
                del self.live_readers[entry[1]]
                self.free_reader_ids.append(entry[1])
            elif kind == "free_reader":
                self.free_reader_ids.remove(entry[1])
                self.live_readers[entry[1]] = None
        self.journal = keep
        self.depth -= 1
        if self.depth == 0:
            self.journal = None
        return restored


def _two_valued(values: list[int] | np.ndarray | int, init: int, other: int) -> bool:
    """Whether every value of ``values`` is ``init`` or ``other``."""
    if isinstance(values, int):
        return values in (init, other)
    if isinstance(values, np.ndarray):
        return not bool(((values != init) & (values != other)).any())
    return set(values) <= {init, other}
