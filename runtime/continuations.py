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
(the order the pages were added): the first best match, the first duplicate.  The maps are flat (a
bucket of one page is the page id itself, a dict only when pages share it): tens of thousands of
live pages must not cost the garbage collector a container each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class Continuations:
    """Pages continuing each chain hash (with their growing tokens), filed by first token, and sealed
    pages by their chain hash."""

    def __init__(self) -> None:
        self.info: dict[int, tuple[int, int, int]] = {}  # pid -> (hash it continues, parent page, open order)
        self.tokens: dict[int, Sequence[int]] = {}  # pid -> its tokens (the record's list while it grows)
        self._added = 0
        self._first: dict[tuple[int, int], int | dict[int, None]] = {}  # (hash, first token) -> page(s)
        self._unfiled: dict[int, int | dict[int, None]] = {}  # hash -> page(s) with no token yet (the others: filed)
        self._sealed: dict[int, int | dict[int, None]] = {}  # chain hash -> page(s) sealed with it
        self._hash_of: dict[int, int] = {}  # pid -> its key in ``_sealed``

    def __len__(self) -> int:
        return len(self.info)

    def add(self, parent_hash: int, pid: int, tokens: Sequence[int], parent: int) -> None:
        """Page ``pid`` (``tokens``: its token list, still growing), whose parent is page ``parent``,
        continues ``parent_hash``."""
        info = self.info
        old = info.get(pid)
        if old is None:  # a page opened (most calls)
            order = self._added
            self._added = order + 1
        elif old[0] == parent_hash:  # added again: keeps its place
            self._unfile(parent_hash, pid)
            order = old[2]
        else:
            self.remove(old[0], pid)
            order = self._added
            self._added = order + 1
        info[pid] = (parent_hash, parent, order)
        self.tokens[pid] = tokens
        if tokens:
            _put(self._first, (parent_hash, tokens[0]), pid)
        elif (unfiled := self._unfiled).get(parent_hash) is None:  # (_put, its first case in line)
            unfiled[parent_hash] = pid
        else:
            _put(unfiled, parent_hash, pid)

    def add_run(self, parent_hashes: list[int], pids: list[int], tokens: list[Sequence[int]], parent: int) -> None:
        """``add`` for a run of pages a write opens, each the parent of the next (``parent`` the first
        one's), in order; a page opened afresh with no token yet (every page of a run) filed in line.
        (One pass of plain dict writes: measured faster, at every run length a write has, than testing
        the run for a fresh one first and filing it by three ``dict.update``s.)"""
        info, held, unfiled = self.info, self.tokens, self._unfiled
        order = self._added
        for parent_hash, pid, toks in zip(parent_hashes, pids, tokens, strict=True):
            if toks or pid in info:
                self._added = order
                self.add(parent_hash, pid, toks, parent)
                order = self._added
            else:
                info[pid] = (parent_hash, parent, order)
                order += 1
                held[pid] = toks
                if unfiled.get(parent_hash) is None:
                    unfiled[parent_hash] = pid
                else:
                    _put(unfiled, parent_hash, pid)
            parent = pid
        self._added = order

    def sealed_tokens(self, pid: int, tokens: Sequence[int]) -> tuple[int, ...]:
        """Page ``pid`` holds ``tokens`` for good (sealed): kept from now on as a tuple, returned."""
        kept = tuple(tokens)
        if pid in self.tokens:
            self.tokens[pid] = kept
        return kept

    def sealed_tokens_many(self, pids: list[int], tokens: list[Sequence[int]]) -> list[tuple[int, ...]]:
        """``sealed_tokens`` for each of ``pids`` and ``tokens``, in order."""
        kept = list(map(tuple, tokens))
        held = self.tokens
        for pid, toks in zip(pids, kept, strict=True):
            if pid in held:
                held[pid] = toks
        return kept

    def sealed_run(self, hashes: list[int], pids: list[int], tokens: list[Sequence[int]]) -> list[tuple[int, ...]]:
        """``sealed_tokens_many(pids, tokens)`` then ``sealed_many(hashes, pids)``, in one pass (each page's
        two steps touch maps the other's do not)."""
        kept = list(map(tuple, tokens))
        held, hash_of, buckets, sealed = self.tokens, self._hash_of, self._sealed, self.sealed
        if (all(map(held.__contains__, pids)) and hash_of.keys().isdisjoint(pids)
                and buckets.keys().isdisjoint(hashes) and len(set(hashes)) == len(hashes)):
            # every page continuing its hash, sealed afresh under a hash of its own (most runs): in C
            held.update(zip(pids, kept, strict=True))
            buckets.update(zip(hashes, pids, strict=True))
            hash_of.update(zip(pids, hashes, strict=True))
            return kept
        for h, pid, toks in zip(hashes, pids, kept, strict=True):
            if pid in held:
                held[pid] = toks
            if pid in hash_of:
                sealed(h, pid)
                continue
            if buckets.get(h) is None:
                buckets[h] = pid
            else:
                _put(buckets, h, pid)
            hash_of[pid] = h
        return kept

    def remove(self, parent_hash: int, pid: int) -> None:
        """``pid`` no longer continues ``parent_hash``."""
        old = self.info.get(pid)
        if old is not None and old[0] == parent_hash:
            self._unfile(parent_hash, pid)
            del self.info[pid], self.tokens[pid]

    def forget_many(self, pairs: list[tuple[int, int]]) -> None:
        """Pages forgotten: ``remove(parent_hash, pid)`` then ``unsealed(pid)`` for each of ``pairs``
        (parent hash, page), in order."""
        info, tokens, hash_of, sealed = self.info, self.tokens, self._hash_of, self._sealed
        unfiled, filed = self._unfiled, self._first
        for parent_hash, pid in pairs:  # (``_unfile`` and ``_take``'s common case, a bucket of one, in line)
            old = info.get(pid)
            if old is not None and old[0] == parent_hash:
                del info[pid]
                held = tokens.pop(pid)
                got = unfiled.get(parent_hash)
                if got is None or (got != pid if got.__class__ is int else pid not in got):  # type: ignore[operator]
                    key = (parent_hash, held[0])  # filed under the first token it had then, which it still has
                    if filed.get(key) == pid:
                        del filed[key]
                    else:
                        _take(filed, key, pid)
                elif got == pid:
                    del unfiled[parent_hash]
                else:
                    _take(unfiled, parent_hash, pid)
            h = hash_of.pop(pid, None)
            if h is not None:
                if sealed.get(h) == pid:
                    del sealed[h]
                else:
                    _take(sealed, h, pid)

    def _file(self, parent_hash: int, pid: int, first: int) -> None:
        _put(self._first, (parent_hash, first), pid)

    def _unfile(self, parent_hash: int, pid: int) -> None:
        unfiled = self._unfiled.get(parent_hash)
        if unfiled is not None and (unfiled == pid if isinstance(unfiled, int) else pid in unfiled):
            _take(self._unfiled, parent_hash, pid)
        else:  # filed under the first token it had then, which it still has
            _take(self._first, (parent_hash, self.tokens[pid][0]), pid)

    def starting(self, parent_hash: int, first: int) -> list[int]:
        """The pages continuing ``parent_hash`` whose first token is ``first`` (in no particular order:
        ``info`` says which came first; ``tokens`` has their tokens)."""
        unfiled = self._unfiled.get(parent_hash)
        if unfiled is not None:
            tokens = self.tokens
            for pid in [unfiled] if isinstance(unfiled, int) else list(unfiled):
                if tokens[pid]:
                    _take(self._unfiled, parent_hash, pid)
                    self._file(parent_hash, pid, tokens[pid][0])
        got = self._first.get((parent_hash, first))
        return [] if got is None else [got] if isinstance(got, int) else list(got)

    # -- sealed pages by their own hash -----------------------------------------------------------
    def sealed(self, h: int, pid: int) -> None:
        """Page ``pid`` was sealed with chain hash ``h``."""
        old = self._hash_of.get(pid)
        if old == h:
            return
        if old is not None:
            self.unsealed(pid)
        _put(self._sealed, h, pid)
        self._hash_of[pid] = h

    def sealed_many(self, hashes: list[int], pids: list[int]) -> None:
        """``sealed(h, pid)`` for each of ``hashes`` and ``pids``, in order (a page sealed afresh, the
        common case, filed in line)."""
        hash_of, buckets, sealed = self._hash_of, self._sealed, self.sealed
        for h, pid in zip(hashes, pids, strict=True):
            if pid in hash_of:
                sealed(h, pid)
                continue
            got = buckets.get(h)
            if got is None:
                buckets[h] = pid
            else:
                _put(buckets, h, pid)
            hash_of[pid] = h

    def unsealed(self, pid: int) -> None:
        """Page ``pid`` is forgotten: no longer a page sealed with its hash."""
        h = self._hash_of.pop(pid, None)
        if h is not None:
            _take(self._sealed, h, pid)

    def alone(self, h: int, pid: int) -> bool:
        """Whether ``pid`` is the only page sealed with chain hash ``h`` (then it has no duplicate)."""
        return self._sealed.get(h) == pid

    def sealed_with(self, h: int) -> list[int]:
        """The pages sealed with chain hash ``h`` (any parent), in open order."""
        got = self._sealed.get(h)
        if got is None:
            return []
        if isinstance(got, int):
            return [got]
        info = self.info
        return sorted(got, key=lambda pid: info[pid][2] if pid in info else -1)

    def duplicate(self, h: int, parent_hash: int, gone: int, sealed: Callable[[int], int | None]) -> int | None:
        """The first opened page other than ``gone`` that continues ``parent_hash`` and whose chain hash
        (``sealed(pid)``: None for a page gone or not sealed) is ``h``; None if there is none."""
        info = self.info
        for other in self.sealed_with(h):
            if other != gone and other in info and info[other][0] == parent_hash and sealed(other) == h:
                return other
        return None


def _put(buckets: dict[Any, int | dict[int, None]], key: Any, pid: int) -> None:
    """Add ``pid`` to the bucket ``key`` (the id alone while it is the only one)."""
    got = buckets.get(key)
    if got is None:
        buckets[key] = pid
    elif isinstance(got, int):
        if got != pid:
            buckets[key] = {got: None, pid: None}
    else:
        got[pid] = None


def _take(buckets: dict[Any, int | dict[int, None]], key: Any, pid: int) -> None:
    """Remove ``pid`` from the bucket ``key`` (back to the id alone when one is left)."""
    got = buckets.get(key)
    if got is None:
        return
    if isinstance(got, int):
        if got == pid:
            del buckets[key]
        return
    got.pop(pid, None)
    if len(got) == 1:
        buckets[key] = next(iter(got))
