"""Who holds a page: the reverse index of a per-(reader, page) variable (the block table's).

::

    page        0     1     2     3     4
    one[p]     -1     5     5    -2    -1          -1: nobody   r >= 0: reader r alone   -2: many[p]
    many                        {3: {5, 7}}

A page quantifier over "the readers that hold p" reads one slot; a batch of one reader's pages (a
prefix attached, a block table freed) updates the slots with array operations, and only its pages
that another reader shares go through the ``many`` sets one by one.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

NOBODY, MANY = -1, -2
_ALL, _ANY = np.logical_and.reduce, np.logical_or.reduce  # (the ufuncs' reductions: no Python wrapper)
SCALAR_UP_TO = 48  # a reindex of at most this many pages updates the slots one by one (numpy's fixed cost is more)


class Holders:
    """``page -> readers`` for one variable: one int64 slot per page id, a set where two or more."""

    def __init__(self, capacity: int) -> None:
        self.slots = array("q", [NOBODY]) * capacity
        self.vec = np.frombuffer(self.slots, dtype=np.int64)
        self.many: dict[int, set[int]] = {}

    def grow(self, capacity: int) -> None:
        """Room for page ids below ``capacity``."""
        old = len(self.slots)
        if capacity > old:
            slots = array("q", [NOBODY]) * capacity
            vec = np.frombuffer(slots, dtype=np.int64)
            vec[:old] = self.vec
            self.slots, self.vec = slots, vec

    def get(self, pid: int) -> Any:
        """The holders of ``pid``: one reader id, a set of two or more, or None."""
        one = self.slots[pid]
        if one >= 0:
            return one
        return self.many[pid] if one == MANY else None

    def readers(self, pid: int) -> set[int]:
        """The holders of ``pid`` as a set."""
        one = self.slots[pid]
        if one >= 0:
            return {one}
        return set(self.many[pid]) if one == MANY else set()

    def hold(self, pid: int, rid: int) -> None:
        """Reader ``rid`` now holds ``pid``."""
        one = self.slots[pid]
        if one == NOBODY:
            self.slots[pid] = rid
        elif one == MANY:
            self.many[pid].add(rid)
        elif one != rid:
            self.many[pid] = {one, rid}
            self.slots[pid] = MANY

    def unhold(self, pid: int, rid: int) -> None:
        """Reader ``rid`` no longer holds ``pid``."""
        one = self.slots[pid]
        if one == rid:
            self.slots[pid] = NOBODY
        elif one == MANY:
            shared = self.many[pid]
            shared.discard(rid)
            if len(shared) == 1:
                self.slots[pid] = shared.pop()
                del self.many[pid]

    def hold_many(self, pids: np.ndarray, rid: int) -> None:
        """Reader ``rid`` now holds every page of ``pids`` (distinct)."""
        cur = self.vec[pids]
        alone = cur == NOBODY
        if _ALL(alone):  # nobody held any (a fresh lease): no selection
            self.vec[pids] = rid
            return
        self.vec[pids[alone]] = rid
        for pid in pids[~alone & (cur != rid)].tolist():
            self.hold(pid, rid)

    def unhold_many(self, pids: np.ndarray, rid: int) -> None:
        """Reader ``rid`` no longer holds any page of ``pids`` (distinct)."""
        cur = self.vec[pids]
        mine = cur == rid
        if _ALL(mine):  # held by ``rid`` alone everywhere (a block table freed): no selection
            self.vec[pids] = NOBODY
            return
        self.vec[pids[mine]] = NOBODY
        for pid in pids[cur == MANY].tolist():
            self.unhold(pid, rid)

    def reindex(self, rid: int, pids: Any, olds: Any, values: Any, init: int) -> None:
        """After reader ``rid``'s entries at ``pids`` went from ``olds`` to ``values`` (arrays or lists;
        ``values`` may be one int for all)."""
        if len(pids) <= SCALAR_UP_TO:  # a block table or two: scalar updates cost less than numpy's fixed cost
            slots = self.slots
            if isinstance(values, int):  # one value for all (a batch's write): only the pages it moved
                if values == init:
                    for pid, old in zip(_ints(pids), _ints(olds), strict=True):
                        if old != init:
                            if slots[pid] == rid:
                                slots[pid] = NOBODY
                            else:
                                self.unhold(pid, rid)
                else:
                    for pid, old in zip(_ints(pids), _ints(olds), strict=True):
                        if old == init:
                            if slots[pid] == NOBODY:
                                slots[pid] = rid
                            else:
                                self.hold(pid, rid)
                return
            for pid, old, value in zip(_ints(pids), _ints(olds), _ints(values), strict=True):
                if (old == init) != (value == init):
                    (self.unhold if value == init else self.hold)(pid, rid)
            return
        p = np.asarray(pids, dtype=np.int64)
        was = np.asarray(olds, dtype=np.int64) != init
        took: np.ndarray | None
        left: np.ndarray | None
        if isinstance(values, int):  # one value for all: every page moved one way, or none
            took, left = (None, was) if values == init else (~was, None)
        else:
            now = np.asarray(values, dtype=np.int64) != init
            took, left = now & ~was, was & ~now
        if took is not None and _ANY(took):
            self.hold_many(p if _ALL(took) else p[took], rid)
        if left is not None and _ANY(left):
            self.unhold_many(p if _ALL(left) else p[left], rid)


def _ints(xs: Any) -> list[int]:
    return xs.tolist() if isinstance(xs, np.ndarray) else list(xs)
