"""The pages that continue a chain hash: where a lookup's partial page is searched, and where a sealed
duplicate is found when the indexed page of a hash is forgotten.

Every page, from its ``open`` to its ``forget``, is a *continuation* of its parent's chain hash (the
root's at block 0), its tokens growing as they are written.  Thousands of pages can continue one
hash (the root's, a shared system prompt's), so they are also filed by their first token, and the
sealed ones by their own chain hash::

    parent hash h      pages continuing h (open order)   #3 [a b c d]  #8 [x y]  #9 []  #12 [a b e f]
    by first token     h, a -> #3 #12      h, x -> #8     (#9 has no token yet: unfiled, filed by the
                                                           first lookup under h that finds it written)
    by own hash        hash(#3) -> #3       hash(#12) -> #12

A page with no token yet when it was opened is filed lazily (tokens only ever grow until the page
is forgotten, so its first token never changes once written).  Every search answers in open order
(the order the pages were added): the first best match, the first duplicate.
"""

from __future__ import annotations

from collections.abc import Iterator


class Continuations:
    """``parent hash -> pages`` (with their growing tokens), filed by first token, and sealed pages by
    their chain hash."""

    def __init__(self) -> None:
        self.by_parent: dict[int, dict[int, list[int]]] = {}  # parent hash -> {pid: tokens}, in open order
        self.parent_of: dict[int, int] = {}  # pid in by_parent -> its parent page (-1 at depth 0)
        self.order: dict[int, int] = {}  # pid -> when it was added (its place in ``by_parent``'s order)
        self._added = 0
        self._first: dict[tuple[int, int], dict[int, list[int]]] = {}  # (parent hash, first token) -> pages
        self._first_of: dict[int, tuple[int, int]] = {}  # pid -> its key in ``_first``
        self._unfiled: dict[int, dict[int, list[int]]] = {}  # parent hash -> pages with no token yet
        self._sealed: dict[int, dict[int, None]] = {}  # chain hash -> pages sealed with it
        self._hash_of: dict[int, int] = {}  # pid -> its key in ``_sealed``

    def add(self, parent_hash: int, pid: int, tokens: list[int], parent: int) -> None:
        """Page ``pid`` (``tokens``: its token list, still growing), whose parent is page ``parent``,
        continues ``parent_hash``."""
        kids = self.by_parent.setdefault(parent_hash, {})
        if pid in kids:  # added again: keeps its place, as a dict keeps a key's
            self._unfile(parent_hash, pid)
        else:
            self.order[pid] = self._added
            self._added += 1
        kids[pid] = tokens
        self.parent_of[pid] = parent
        if tokens:
            self._file(parent_hash, pid, tokens)
        else:
            self._unfiled.setdefault(parent_hash, {})[pid] = tokens

    def remove(self, parent_hash: int, pid: int) -> None:
        """``pid`` no longer continues ``parent_hash``."""
        kids = self.by_parent.get(parent_hash)
        if kids is not None and kids.pop(pid, None) is not None:
            if not kids:
                del self.by_parent[parent_hash]
            self._unfile(parent_hash, pid)
            del self.order[pid]
        self.parent_of.pop(pid, None)

    def _file(self, parent_hash: int, pid: int, tokens: list[int]) -> None:
        key = (parent_hash, tokens[0])
        self._first.setdefault(key, {})[pid] = tokens
        self._first_of[pid] = key

    def _unfile(self, parent_hash: int, pid: int) -> None:
        key = self._first_of.pop(pid, None)
        if key is not None:
            bucket = self._first[key]
            del bucket[pid]
            if not bucket:
                del self._first[key]
            return
        unfiled = self._unfiled.get(parent_hash)
        if unfiled is not None:
            unfiled.pop(pid, None)
            if not unfiled:
                del self._unfiled[parent_hash]

    def starting(self, parent_hash: int, first: int) -> Iterator[tuple[int, list[int]]]:
        """The pages continuing ``parent_hash`` whose first token is ``first``, with their tokens (in
        no particular order: ``order`` says which came first)."""
        unfiled = self._unfiled.get(parent_hash)
        if unfiled:
            for pid, tokens in [item for item in unfiled.items() if item[1]]:
                del unfiled[pid]
                self._file(parent_hash, pid, tokens)
            if not unfiled:
                del self._unfiled[parent_hash]
        return iter(self._first.get((parent_hash, first), {}).items())

    # -- sealed pages by their own hash -----------------------------------------------------------
    def sealed(self, h: int, pid: int) -> None:
        """Page ``pid`` was sealed with chain hash ``h``."""
        old = self._hash_of.get(pid)
        if old is not None and old != h:
            self.unsealed(pid)
        self._sealed.setdefault(h, {})[pid] = None
        self._hash_of[pid] = h

    def unsealed(self, pid: int) -> None:
        """Page ``pid`` is forgotten: no longer a page sealed with its hash."""
        h = self._hash_of.pop(pid, None)
        if h is not None:
            pages = self._sealed[h]
            del pages[pid]
            if not pages:
                del self._sealed[h]

    def sealed_with(self, h: int) -> list[int]:
        """The pages sealed with chain hash ``h`` (any parent), in open order."""
        pages = self._sealed.get(h)
        if not pages:
            return []
        order = self.order
        return sorted(pages, key=lambda pid: order.get(pid, -1))
