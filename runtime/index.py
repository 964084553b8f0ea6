"""The prefix index: chain hashes of sealed pages, and the nominal hit of a token sequence.

Pages chain by hash (``chainhash.py``): every whole page of a request gets its key at once, one
dict lookup each in a single C-level pass, and the walk stops at the first key not indexed.  A key
is only a candidate: the hit pages' stored tokens are compared with the request's (one vectorized
compare of the gathered rows) and each page's chain with its predecessor's (exact chain classes,
below), and the hit ends at the first page that differs.  A hash collision can shorten a hit; it
can never serve another prefix's KV.  The nominal hit then compares the request's remaining tokens
with the stored tokens of the cached pages that continue the verified chain (sealed or still
filling), so a hit can end in the middle of a page::

    C = 4          page 0        page 1        page 2        page 3 (cached, tokens a b c d)
    request        w x y z   |   1 2 3 4   |   5 6 7 8   |   a b Q ...
    keys           h0            h1            h2            -- h3 not indexed
    index          h0 -> 7       h1 -> 2       h2 -> 9
    verified       rows[7] == w x y z, rows[2] == 1 2 3 4, rows[9] == 5 6 7 8 ?  no: 5 6 7 0
                   (a collision)                      -> the hit stops after page 1
    partial        children of page 2 (by h1, same chain class): lcp("5 6 7 8", stored) <= C - 1
    nominal        4 + 4 + lcp tokens

Chain classes make "the same prefix" exact without trusting a hash: a sealed page's class is
interned from (its parent's class, its tokens), so two pages share a class exactly when their
whole prefixes are equal token for token (pages written twice, by two sequences, share one).  A
hit page is accepted when its tokens equal the request's page and its parent's class is the class
of the page accepted before it (the root class at depth 0)::

    class(page) = intern[(class(parent page), tokens of the page)]     class(root) = 0
    accept hit[i]  <=>  rows[hit[i]] == request page i  and  pclass[hit[i]] == class(hit[i-1])
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .chainhash import ROOT_HASH, chain_hash, chain_keys
from .keytable import KeyTable

__all__ = ["ROOT_HASH", "NominalHit", "PrefixIndex", "SealedRows", "chain_hash", "token_array"]

ROOT_CLASS = 0


def token_array(tokens: Sequence[int]) -> array[int]:
    """Tokens as unsigned 64-bit ints (the values the chain hash reads)."""
    return tokens if isinstance(tokens, array) and tokens.typecode == "Q" else array("Q", tokens)


@dataclass(frozen=True)
class NominalHit:
    """Pages of the nominal hit: ``full`` whole pages, then optionally ``partial`` with ``partial_len``
    matching tokens; ``tokens`` is the nominal hit length."""

    full: tuple[int, ...]
    partial: int | None
    partial_len: int
    tokens: int
    ids: np.ndarray | None = field(default=None, compare=False, repr=False)  # ``full`` as int64, if at hand

    @property
    def pages(self) -> tuple[int, ...]:
        """Every page the hit touches, in block order."""
        return self.full + ((self.partial,) if self.partial is not None else ())

    def page_ids(self) -> np.ndarray:
        """``pages`` as an int64 array."""
        full = self.ids if self.ids is not None else np.array(self.full, dtype=np.int64)
        return full if self.partial is None else np.append(full, np.int64(self.partial))


class SealedRows:
    """The tokens and chain class of every sealed page, by page id (rows of a numpy table)."""

    def __init__(self, page_size: int, capacity: int = 64) -> None:
        self.C = page_size
        self.rows = np.zeros((capacity, page_size), dtype=np.uint64)
        self.cls = np.full(capacity, -1, dtype=np.int64)  # -1: not sealed
        self.pcls = np.full(capacity, -1, dtype=np.int64)  # the parent's class
        self._intern: dict[tuple[int, bytes], int] = {}
        self._members: dict[int, list[object]] = {}  # class -> [its intern key, live pages]
        self._next = ROOT_CLASS + 1

    def _ensure(self, pid: int) -> None:
        size = len(self.cls)
        if pid < size:
            return
        new = max(2 * size, pid + 1)
        rows = np.zeros((new, self.C), dtype=np.uint64)
        rows[:size] = self.rows
        cls = np.full(new, -1, dtype=np.int64)
        cls[:size] = self.cls
        pcls = np.full(new, -1, dtype=np.int64)
        pcls[:size] = self.pcls
        self.rows, self.cls, self.pcls = rows, cls, pcls

    def seal(self, pid: int, parent: int, tokens: Sequence[int]) -> int:
        """Keep the tokens of sealed page ``pid`` (after page ``parent``, -1 at depth 0); its class."""
        self._ensure(pid)
        row = self.rows[pid]
        row[:] = np.asarray(token_array(tokens), dtype=np.uint64)
        pc = ROOT_CLASS if parent < 0 else int(self.cls[parent])
        assert pc >= 0, f"page {pid} sealed after page {parent}, which is not sealed"
        key = (pc, row.tobytes())
        c = self._intern.get(key)
        if c is None:
            c = self._intern[key] = self._next
            self._next += 1
            self._members[c] = [key, 0]
        self._members[c][1] += 1  # type: ignore[operator]
        self.cls[pid], self.pcls[pid] = c, pc
        return c

    def forget(self, pid: int) -> None:
        """Drop what ``pid`` kept (nothing if it was never sealed)."""
        if pid >= len(self.cls) or self.cls[pid] < 0:
            return
        c = int(self.cls[pid])
        entry = self._members[c]
        entry[1] -= 1  # type: ignore[operator]
        if not entry[1]:
            del self._intern[entry[0]]  # type: ignore[arg-type]
            del self._members[c]
        self.cls[pid] = self.pcls[pid] = -1

    def same_chain(self, page: int, parent: int) -> bool:
        """Whether ``page``'s parent holds exactly the prefix sealed page ``parent`` holds (-1: root)."""
        return bool(self.pcls[page] == (ROOT_CLASS if parent < 0 else self.cls[parent]))

    def verified(self, ids: np.ndarray, rows: np.ndarray) -> int:
        """How many leading pages of ``ids`` (sealed) hold exactly ``rows`` (their tokens) after the
        pages before them (the first after the root)."""
        k = len(ids)
        if not k:
            return 0
        ne = (self.rows.take(ids, axis=0) != rows).ravel()
        first = int(ne.argmax())
        if ne[first]:
            k = first // self.C
        if not k:
            return 0
        pcls = self.pcls.take(ids[:k])
        broken = pcls[1:] != self.cls.take(ids[:k - 1])
        at = int(broken.argmax()) if k > 1 else 0
        if pcls[0] != ROOT_CLASS:
            return 0
        return at + 1 if k > 1 and broken[at] else k

    def problems(self, records: dict[int, tuple[int, list[int]]]) -> list[str]:
        """Disagreements with ``records`` (sealed page -> (parent, tokens)); empty when consistent."""
        out = []
        for pid, (parent, tokens) in records.items():
            if pid >= len(self.cls) or self.cls[pid] < 0:
                out.append(f"sealed page {pid} has no row in the index")
            elif self.rows[pid].tolist() != list(tokens) or not self.same_chain(pid, parent):
                out.append(f"sealed page {pid}: its row or chain class disagrees with its record")
        live = int((self.cls >= 0).sum())
        if live != len(records):
            out.append(f"{live} sealed rows kept for {len(records)} sealed pages")
        return out


class PrefixIndex:
    """``hash -> page`` for sealed pages, ``parent hash -> pages`` for partial matches, and the sealed
    pages' tokens and chain classes that verify a hit."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.by_hash: dict[int, int] = {}
        self.by_parent: dict[int, dict[int, list[int]]] = {}  # parent hash -> {pid: tokens}
        self.parent_of: dict[int, int] = {}  # pid in by_parent -> its parent page (-1 at depth 0)
        self.sealed = SealedRows(page_size)
        self.table = KeyTable()  # by_hash, for many keys at once

    def add_child(self, parent_hash: int, pid: int, tokens: list[int], parent: int) -> None:
        """Make page ``pid`` (tokens still growing), whose parent is page ``parent`` (-1 at depth 0), a
        candidate continuation of ``parent_hash``."""
        self.by_parent.setdefault(parent_hash, {})[pid] = tokens
        self.parent_of[pid] = parent

    def remove_child(self, parent_hash: int, pid: int) -> None:
        """Forget ``pid`` as a continuation."""
        kids = self.by_parent.get(parent_hash)
        if kids is not None:
            kids.pop(pid, None)
            if not kids:
                del self.by_parent[parent_hash]
        self.parent_of.pop(pid, None)

    def seal(self, pid: int, parent: int, tokens: Sequence[int]) -> None:
        """Keep sealed page ``pid``'s tokens and chain class (every sealed page, indexed or not)."""
        self.sealed.seal(pid, parent, tokens)

    def forget(self, pid: int) -> None:
        """Drop what the index keeps of page ``pid`` beyond its entries (its row and class)."""
        self.sealed.forget(pid)

    def add_sealed(self, h: int, pid: int) -> bool:
        """Index a sealed page under its chain hash; False if another page already has that hash."""
        if h in self.by_hash:
            return False
        self.by_hash[h] = pid
        self.table.add(h, pid)
        return True

    def remove_sealed(self, h: int, pid: int) -> None:
        """Drop the index entry of ``pid`` (only if it is the indexed page for ``h``)."""
        if self.by_hash.get(h) == pid:
            del self.by_hash[h]
            self.table.remove(h)

    def _walk(self, tokens: array[int], pages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The indexed pages of the first ``pages`` whole pages, up to the first key not indexed; the
        request's rows and keys."""
        rows = np.frombuffer(tokens, dtype=np.uint64, count=pages * self.page_size).reshape(pages, self.page_size)
        keys = chain_keys(rows)
        ids = self.table.find(keys)
        miss = int(ids.argmin())
        return (ids[:miss] if ids[miss] < 0 else ids), rows, keys

    def nominal(self, tokens: Sequence[int], limit: int | None = None) -> NominalHit:
        """The longest cached prefix of ``tokens`` (at most ``limit`` tokens), every whole page verified."""
        c = self.page_size
        n = len(tokens) if limit is None else min(limit, len(tokens))
        full: list[int] = []
        h, last, hit = ROOT_HASH, -1, None
        if n >= c and self.by_hash:
            ids, rows, keys = self._walk(token_array(tokens), n // c)
            k = self.sealed.verified(ids, rows[:len(ids)])
            if k:
                hit = ids[:k]
                full = hit.tolist()
                h, last = int(keys[k - 1]), full[-1]
        i = len(full) * c
        best, best_len = None, 0
        rest = tokens[i:min(n, i + c)]
        first = rest[0] if rest else None
        for pid, stored in self.by_parent.get(h, {}).items() if rest else ():
            if not stored or stored[0] != first or not self._continues(pid, last):
                continue
            m = 0
            top = min(len(rest), len(stored))
            while m < top and rest[m] == stored[m]:
                m += 1
            m = min(m, c - 1)
            if m > best_len:
                best, best_len = pid, m
        return NominalHit(tuple(full), best, best_len, i + best_len, hit)

    def _continues(self, pid: int, last: int) -> bool:
        """Whether page ``pid`` continues exactly the prefix ending with sealed page ``last``."""
        parent = self.parent_of[pid]
        if parent == last:
            return True
        return parent >= 0 and last >= 0 and bool(self.sealed.cls[parent] == self.sealed.cls[last])

    def chain(self, tokens: Sequence[int]) -> list[int]:
        """The hash-only walk: page ids of the indexed whole-page prefix, nothing validated (the
        benchmark's baseline)."""
        n = len(tokens) // self.page_size
        return self._walk(token_array(tokens), n)[0].tolist() if n and self.by_hash else []  # type: ignore[no-any-return]
