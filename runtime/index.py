"""The prefix index: chain hashes of sealed pages, and the nominal hit of a token sequence.

Every whole page of a request gets its chain key at once (``chainhash.py``), and every key its
candidate page at once (``keytable.py``, a mirror of ``by_hash``).  A key is never trusted: the
candidates' stored tokens are gathered and compared with the request's in one vectorized compare,
and each candidate's chain with its predecessor's (exact chain classes, below); the hit ends at the
first page that differs (or has no candidate).  A hash collision can shorten a hit; it can never
serve another prefix's KV.  The nominal hit then compares the request's remaining tokens with the
stored tokens of the cached pages that continue the verified chain (sealed or still filling), so a
hit can end in the middle of a page (C = 4; ``#7`` is page id 7)::

    block            0             1             2             3
    request          w x y z   |   1 2 3 4   |   5 6 7 8   |   a b Q
    keys             h0            h1            h2            (3 whole pages only)
    candidates       #7            #2            #9
    rows[#]          w x y z       1 2 3 4       5 6 7 0       <- #9 collided: it holds other tokens
    chain classes    root -> #7 -> #2  ok
    verified         #7 #2                                    -> 2 whole pages, 8 tokens
    partial          the children of #2 (filed under h1, in #2's chain class), say #4 = 5 6 9 ...:
                     lcp(5 6 7 8, 5 6 9) = 2, at most C - 1
    nominal          8 + 2 = 10 tokens: full (#7, #2), partial #4

Chain classes make "the same prefix" exact without trusting a hash: a sealed page's class is
interned from (its parent's class, its tokens), so two pages share a class exactly when their
whole prefixes are equal token for token (pages written twice, by two sequences, share one).  A
candidate is accepted when its tokens equal the request's page and its parent's class is the class
of the page accepted before it (the root's at block 0)::

    class(page)         = intern[(class(parent page), tokens of the page)]      class(root) = 1
    accept candidate i  <=>  rows[cand[i]] == request page i
                             and  pclass[cand[i]] == (class(cand[i-1]) if i else class(root))

The module is a little longer than most: the walk and the sealed rows it verifies against read best
together.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from . import chainhash
from .chainhash import MASK, ROOT_HASH, K, chain_hash, chain_keys
from .continuations import Continuations
from .keytable import KeyTable

__all__ = ["ROOT_HASH", "NominalHit", "PrefixIndex", "SealedRows", "chain_hash", "token_array"]

UNSEALED, ROOT_CLASS = 0, 1  # chain classes (uint64): a page's is at least 2
NO_CLASS = (1 << 64) - 1  # the class of the row an id of -1 reads (its parent class, one less, is no page's either)
WALK_PAGES = 8  # a request's first pages walked one at a time in Python (most hits are this short); longer: numpy
WALK_UP_TO = 256  # requests of more whole pages go to the vector pass straight (its fixed cost is small beside theirs)


_CONVERTED: list[tuple[tuple[int, ...], array[int]]] = [((), array("Q"))]  # the last tuple converted, its words


def token_array(tokens: Sequence[int]) -> array[int]:
    """Tokens as unsigned 64-bit ints; a list by ``fromlist`` (a third cheaper than the constructor; same
    errors).  The tuple converted last is kept with its words and given again (a lookup after a
    recovery asks for the same tuple) as a copy of them, the caller's own: a memory copy, not a
    conversion."""
    cls = tokens.__class__
    if cls is list:
        (out := array("Q")).fromlist(tokens)  # type: ignore[arg-type]
        return out
    if cls is tuple:
        last = _CONVERTED[0]  # (read once: another thread may replace it)
        if last[0] is tokens:  # (kept alive by the entry: the same tuple, so the same tokens)
            return last[1][:]
        out = array("Q", tokens)
        _CONVERTED[0] = (tokens, out)  # type: ignore[assignment]
        return out[:]
    return tokens if isinstance(tokens, array) and tokens.typecode == "Q" else array("Q", tokens)


@dataclass(frozen=True)
class NominalHit:
    """Pages of the nominal hit: ``whole`` the whole pages (block order: the walk's list, or an int64
    array from the vector pass), then optionally ``partial`` with ``partial_len`` matching tokens;
    ``tokens`` is the nominal hit length."""

    whole: Sequence[int] | np.ndarray = field(compare=False, repr=False)
    partial: int | None
    partial_len: int
    tokens: int

    @cached_property
    def ids(self) -> np.ndarray:
        """The whole pages as a read-only int64 array (a lease of them shares it; the walk's list
        converted on first use: most hits are only read as a list)."""
        whole = self.whole
        if isinstance(whole, np.ndarray):
            return whole
        out = np.array(whole, dtype=np.int64)
        out.flags.writeable = False
        return out

    @cached_property
    def full(self) -> tuple[int, ...]:
        """The whole pages as a tuple (made on first use)."""
        whole = self.whole
        return tuple(whole.tolist() if isinstance(whole, np.ndarray) else whole)

    @property
    def pages(self) -> tuple[int, ...]:
        """Every page the hit touches, in block order."""
        return self.full + ((self.partial,) if self.partial is not None else ())

    def page_ids(self) -> Sequence[int] | np.ndarray:
        """``pages`` as a list (a hit the walk found) or an int64 array (the vector pass's)."""
        whole = self.whole
        if self.partial is None:
            return whole
        if whole.__class__ is list:
            return whole + [self.partial]  # type: ignore[operator]
        out = np.empty(len(whole) + 1, dtype=np.int64)  # (np.append's wrapper costs more than the copy)
        out[:-1] = whole
        out[-1] = self.partial
        return out


_NEW = object.__new__


def _hit(whole: Sequence[int] | np.ndarray, partial: int | None, partial_len: int, tokens: int) -> NominalHit:
    """``NominalHit(whole, partial, partial_len, tokens)``: the same frozen value, its fields set in one
    update of its ``__dict__`` instead of the frozen ``__init__``'s guarded write per field."""
    out: NominalHit = _NEW(NominalHit)
    out.__dict__.update(whole=whole, partial=partial, partial_len=partial_len, tokens=tokens)
    return out


class Scratch:
    """The work arrays of a verification, reused from call to call and grown to the largest request
    (a large temporary allocated afresh would be mapped and faulted in afresh on every call)."""

    def __init__(self) -> None:
        self.words = np.empty(0, dtype=np.uint64)
        self.flags = np.empty(0, dtype=bool)

    def get(self, pages: int, c: int) -> tuple[np.ndarray, np.ndarray]:
        """A uint64 and a bool array of shape ``(pages, c)`` (contents undefined)."""
        n = pages * c
        if len(self.flags) < n:
            size = max(n, 2 * len(self.flags))
            self.words, self.flags = np.empty(size, dtype=np.uint64), np.empty(size, dtype=bool)
        return self.words[:n].reshape(pages, c), self.flags[:n].reshape(pages, c)


class SealedRows:
    """The tokens and chain class of every sealed page, by page id (rows of numpy tables).  The last
    row is no page's: an id of -1 reads it, and its parent class matches no page's class."""

    def __init__(self, page_size: int, capacity: int = 64) -> None:
        self.C = page_size
        self.rows = np.zeros((capacity + 1, page_size), dtype=np.uint64)
        self.cls = np.zeros(capacity + 1, dtype=np.uint64)  # UNSEALED for a page not sealed
        self.pcls = np.zeros(capacity + 1, dtype=np.uint64)  # the parent's class
        self.cls[-1], self.pcls[-1] = NO_CLASS, NO_CLASS - 1
        self._intern: dict[tuple[int, bytes], int] = {}
        self._key_of: dict[int, tuple[int, bytes]] = {}  # class -> its intern key
        self._members: dict[int, int] = {}  # class -> its live pages (flat maps: no container per class)
        self._next = ROOT_CLASS + 1

    def _ensure(self, pid: int) -> None:
        size = len(self.cls) - 1
        if pid < size:
            return
        new = max(2 * size, pid + 1)
        rows = np.zeros((new + 1, self.C), dtype=np.uint64)
        rows[:size] = self.rows[:size]
        cls, pcls = np.zeros(new + 1, dtype=np.uint64), np.zeros(new + 1, dtype=np.uint64)
        cls[:size], pcls[:size] = self.cls[:size], self.pcls[:size]
        cls[-1], pcls[-1] = NO_CLASS, NO_CLASS - 1
        self.rows, self.cls, self.pcls = rows, cls, pcls

    def seal(self, pid: int, parent: int, tokens: Sequence[int] | np.ndarray) -> int:
        """Keep the tokens of sealed page ``pid`` (after page ``parent``, -1 at depth 0; a list or a uint64
        row); its class."""
        self._ensure(pid)
        row = self.rows[pid]
        row[:] = tokens
        pc = ROOT_CLASS if parent < 0 else int(self.cls[parent])
        assert pc != UNSEALED, f"page {pid} sealed after page {parent}, which is not sealed"
        key = (pc, row.tobytes())
        c = self._intern.get(key)
        if c is None:
            c = self._intern[key] = self._next
            self._next += 1
            self._key_of[c] = key
            self._members[c] = 0
        self._members[c] += 1
        self.cls[pid], self.pcls[pid] = c, pc
        return c

    def seal_many(self, pids: list[int], parents: list[int], rows: np.ndarray) -> None:
        """``seal`` for many pages in order (``rows``: their tokens, pages x C uint64; a page's parent may
        be one sealed before it here): the rows and classes stored as arrays, each interned in turn.  A
        page after the one before it here whose class is new (a write's run of pages) takes a new class
        without a look-up: no page is keyed under a class made a moment ago."""
        self._ensure(max(pids))
        ids = np.array(pids, dtype=np.int64)  # converted once (three fancy writes)
        self.rows[ids] = rows
        data, width = rows.tobytes(), self.C * 8
        intern, members, key_of, cls, nxt = self._intern, self._members, self._key_of, self.cls, self._next
        got: dict[int, int] = {}  # the classes given here, by page
        classes, pclasses = [], []
        at, prev, c, made = 0, -2, 0, False
        for pid, parent in zip(pids, parents, strict=True):
            if parent == prev:  # the page just sealed here
                pc = c
            else:
                pc = got.get(parent) or (ROOT_CLASS if parent < 0 else cls.item(parent))
                assert pc != UNSEALED, f"page {pid} sealed after page {parent}, which is not sealed"
                made = False
            key = (pc, data[at:at + width])
            at += width
            if made or (c := intern.get(key)) is None:  # type: ignore[assignment]
                c = intern[key] = nxt
                nxt += 1
                key_of[c] = key
                members[c] = 1
                made = True
            else:
                members[c] += 1
            got[pid] = c
            prev = pid
            classes.append(c)
            pclasses.append(pc)
        self._next = nxt
        cls[ids], self.pcls[ids] = classes, pclasses

    def forget(self, pid: int) -> None:
        """Drop what ``pid`` kept (nothing if it was never sealed)."""
        if pid >= len(self.cls) - 1 or self.cls[pid] == UNSEALED:
            return
        c = int(self.cls[pid])
        left = self._members[c] - 1
        if left:
            self._members[c] = left
        else:
            del self._intern[self._key_of.pop(c)]
            del self._members[c]
        self.cls[pid] = self.pcls[pid] = UNSEALED

    def forget_many(self, pids: list[int]) -> None:
        """``forget`` for each of ``pids`` (distinct), the rows' classes reset at once."""
        if len(pids) < 8:  # a few: scalar updates cost less than numpy's fixed cost
            for pid in pids:
                self.forget(pid)
            return
        ids = np.array(pids, dtype=np.int64)  # converted once (three fancy indexings below)
        if max(pids) >= len(self.cls) - 1:  # (the list's own max: no numpy reduction's wrapper)
            ids = ids[ids < len(self.cls) - 1]
        members, intern, key_of = self._members, self._intern, self._key_of
        for c in self.cls[ids].tolist():
            if c == UNSEALED:  # (never sealed, or forgotten already)
                continue
            left = members[c] - 1
            if left:
                members[c] = left
            else:
                del intern[key_of.pop(c)]
                del members[c]
        self.cls[ids] = UNSEALED
        self.pcls[ids] = UNSEALED

    def same_chain(self, page: int, parent: int) -> bool:
        """Whether ``page``'s parent holds exactly the prefix sealed page ``parent`` holds (-1: root)."""
        return bool(self.pcls[page] == (ROOT_CLASS if parent < 0 else self.cls[parent]))

    def verified(self, ids: np.ndarray, rows: np.ndarray, scratch: Scratch, after: int = ROOT_CLASS) -> int:
        """How many leading pages of ``ids`` (sealed pages, or -1: none) hold exactly ``rows`` (their
        tokens) after the pages before them (the first after a page of class ``after``: the root's)."""
        k = len(ids)
        if not k:
            return 0
        stored, same = scratch.get(k, self.C)
        self.rows.take(ids, axis=0, out=stored, mode="wrap")  # -1: the last row; "raise" would buffer
        same = np.equal(stored, rows, out=same).ravel()
        first = int(same.argmin())
        if not same[first]:
            k = first // self.C
        if not k:
            return 0
        pcls = self.pcls.take(ids[:k])
        if pcls[0] != after:
            return 0
        if k > 1:
            linked = pcls[1:] == self.cls.take(ids[:k - 1])
            at = int(linked.argmin())
            if not linked[at]:
                return at + 1
        return k

    def problems(self, records: dict[int, tuple[int, Sequence[int]]]) -> list[str]:
        """Disagreements with ``records`` (sealed page -> (parent, tokens)); empty when consistent."""
        out = []
        for pid, (parent, tokens) in records.items():
            if pid >= len(self.cls) - 1 or self.cls[pid] == UNSEALED:
                out.append(f"sealed page {pid} has no row in the index")
            elif self.rows[pid].tolist() != list(tokens) or not self.same_chain(pid, parent):
                out.append(f"sealed page {pid}: its row or chain class disagrees with its record")
        live = int(np.count_nonzero(self.cls[:-1]))
        if live != len(records):
            out.append(f"{live} sealed rows kept for {len(records)} sealed pages")
        classes, members = np.unique(self.cls[:-1][self.cls[:-1] != UNSEALED], return_counts=True)
        if dict(zip(classes.tolist(), members.tolist(), strict=True)) != self._members:
            out.append("the chain classes' member counts disagree with the sealed rows")
        return out


class PrefixIndex:
    """``hash -> page`` for sealed pages, ``parent hash -> pages`` for partial matches, and the sealed
    pages' tokens and chain classes that verify a hit."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.by_hash: dict[int, int] = {}
        self.kids = Continuations()  # parent hash -> pages continuing it, by first token; sealed pages by hash
        self.sealed = SealedRows(page_size)
        self.table = KeyTable()  # by_hash, for many keys at once
        self.scratch = Scratch()
        # ``add_child(parent_hash, pid, tokens, parent)``: page ``pid`` (tokens still growing), whose parent
        # is page ``parent`` (-1 at depth 0), a candidate continuation of ``parent_hash``; and
        # ``remove_child(parent_hash, pid)``: ``pid`` no longer one.  The continuations' own calls (a page
        # opened calls it: no layer that only forwards).
        self.add_child: Callable[[int, int, Sequence[int], int], None] = self.kids.add
        self.remove_child: Callable[[int, int], None] = self.kids.remove
        # ``add_children(parent_hashes, pids, tokens, parent)``: ``add_child`` for a run of pages a write
        # opens, each the parent of the next (``parent`` the first one's)
        self.add_children: Callable[[list[int], list[int], list[Sequence[int]], int], None] = self.kids.add_run

    def seal(self, pid: int, parent: int, tokens: Sequence[int], row: np.ndarray | None = None) -> tuple[int, ...]:
        """Keep sealed page ``pid``'s tokens and chain class (every sealed page, indexed or not; ``row``:
        the same tokens as a uint64 row, when the caller has one); its tokens as the tuple its record and
        continuation keep from now on (no container for the GC)."""
        self.sealed.seal(pid, parent, tokens if row is None else row)
        return self.kids.sealed_tokens(pid, tokens)

    def seal_many(self, pids: list[int], parents: list[int], tokens: list[Sequence[int]], rows: np.ndarray,
                  hashes: list[int]) -> list[tuple[int, ...]]:
        """``seal`` then ``add_sealed`` for many sealed pages in order (their tokens also as the rows of
        one array, ``hashes`` their chain hashes): their tokens as the tuples the records keep."""
        self.sealed.seal_many(pids, parents, rows)
        kept = self.kids.sealed_run(hashes, pids, tokens)
        self._index_many(hashes, pids)
        return kept

    def forget(self, pid: int) -> None:
        """Drop what the index keeps of page ``pid`` beyond its entries (its row and class, its hash)."""
        self.sealed.forget(pid)
        self.kids.unsealed(pid)

    def forget_many(self, pairs: list[tuple[int, int]]) -> None:
        """Pages forgotten: ``remove_child(parent_hash, pid)`` then ``forget(pid)`` for each of ``pairs``
        (parent hash, page), in order, their rows dropped at once."""
        self.kids.forget_many(pairs)
        self.sealed.forget_many([pid for _, pid in pairs])

    def add_sealed(self, h: int, pid: int) -> bool:
        """Index a sealed page under its chain hash; False if another page already has that hash (the
        page is then a duplicate ``kids.duplicate`` may find)."""
        self.kids.sealed(h, pid)
        if h in self.by_hash:
            return False
        self.by_hash[h] = pid
        self.table.add(h, pid)
        return True

    def add_sealed_many(self, hashes: list[int], pids: list[int]) -> None:
        """``add_sealed(h, pid)`` for each of ``hashes`` and ``pids``, in order (the first page of a hash
        indexed, the later ones duplicates; the continuations filed first)."""
        self.kids.sealed_many(hashes, pids)
        self._index_many(hashes, pids)

    def _index_many(self, hashes: list[int], pids: list[int]) -> None:
        """``by_hash`` (and the key table) for each page of a hash not indexed yet, in order."""
        by_hash = self.by_hash
        if by_hash.keys().isdisjoint(hashes) and len(set(hashes)) == len(hashes):  # all new (most writes): in C
            by_hash.update(zip(hashes, pids, strict=True))
            self.table.add_many(hashes, pids)
            return
        keys, pages = [], []
        for h, pid in zip(hashes, pids, strict=True):
            if h not in by_hash:
                by_hash[h] = pid
                keys.append(h)
                pages.append(pid)
        self.table.add_many(keys, pages)  # in the same order

    def remove_sealed(self, h: int, pid: int) -> None:
        """Drop the index entry of ``pid`` (only if it is the indexed page for ``h``)."""
        if self.by_hash.get(h) == pid:
            del self.by_hash[h]
            self.table.remove(h)

    def remove_sealed_many(self, entries: list[tuple[int, int]]) -> None:
        """``remove_sealed(h, pid)`` for each of ``entries``, in order, the key table's entries removed at once."""
        by_hash, gone = self.by_hash, []
        for h, pid in entries:
            if by_hash.get(h) == pid:
                del by_hash[h]
                gone.append(h)
        self.table.remove_many(gone)

    def _keys(self, tokens: array[int], pages: int) -> tuple[np.ndarray, np.ndarray]:
        """The request's first ``pages`` whole pages as rows, and their chain keys."""
        rows = np.frombuffer(tokens, dtype=np.uint64, count=pages * self.page_size).reshape(pages, self.page_size)
        return rows, chain_keys(rows)

    def nominal(self, tokens: Sequence[int], limit: int | None = None) -> NominalHit:
        """The longest cached prefix of ``tokens`` (at most ``limit`` tokens), every whole page verified.

        The first ``WALK_PAGES`` whole pages of a request of at most ``WALK_UP_TO`` are walked one at a
        time (``_walk``: a page's key, its indexed page, its row and chain class, stopping at the first
        page that fails), which is all most lookups need; a longer request is keyed and verified whole by
        the vector pass (``chain_keys``, the key table, ``SealedRows.verified``), which gives the same
        pages, and one whose walk verifies them all has its later pages keyed and verified so, after the
        walk's last key and class."""
        c = self.page_size
        n = len(tokens) if limit is None else min(limit, len(tokens))
        h, last = ROOT_HASH, -1
        hit: Sequence[int] | np.ndarray = []
        whole = n // c
        if whole and self.by_hash:
            toks = token_array(tokens)
            walk = min(whole, WALK_PAGES) if whole <= WALK_UP_TO else 0
            walked, h = self._walk(toks, walk)
            if len(walked) == walk and whole > walk:  # the pages after the walked ones keyed and verified at once
                rows = np.frombuffer(toks, dtype=np.uint64, count=whole * c).reshape(whole, c)[walk:]
                keys = chain_keys(rows, h)
                ids = self.table.candidates(keys)
                after = self.sealed.cls.item(walked[-1]) if walk else ROOT_CLASS  # the class the next page follows
                k = self.sealed.verified(ids, rows, self.scratch, after)
                if walk:
                    joined = np.concatenate((walked, ids[:k]))  # (an int64 array of its own)
                    joined.flags.writeable = False
                    hit = joined
                else:
                    hit = ids[:k]
                if k:
                    h, last = int(keys[k - 1]), int(ids[k - 1])
                elif walk:
                    last = walked[-1]
            elif walked:
                hit = walked  # (the walk's own list)
                last = walked[-1]
        i = len(hit) * c
        best, best_len = None, 0
        rest = tokens[i:min(n, i + c)]
        found = self.kids.starting(h, rest[0]) if rest else None  # the pages whose first token matches
        if found:
            info, stored_of, cls = self.kids.info, self.kids.tokens, self.sealed.cls
            last_cls = cls.item(last) if last >= 0 else -1
            best_order = -1
            for pid in found:
                _, parent, order = info[pid]
                if parent != last and (parent < 0 or last < 0 or cls.item(parent) != last_cls):
                    continue  # it continues another prefix (_continues)
                stored = stored_of[pid]
                m = 1
                top = min(len(rest), len(stored))
                while m < top and rest[m] == stored[m]:
                    m += 1
                m = min(m, c - 1)
                if m > best_len or (m == best_len and best is not None and order < best_order):
                    best, best_len, best_order = pid, m, order  # the longest match, the first opened of equals
        return _hit(hit, best, best_len, i + best_len)

    def _walk(self, tokens: array[int], pages: int) -> tuple[list[int], int]:
        """The verified pages among the first ``pages`` whole pages of ``tokens``, one at a time, and the
        chain key of the last (the root's if none): what the vector pass finds there, page by page::

            key[i]   = K * key[i-1] + digest(page i)       (mod 2**64; key[-1] = ROOT_HASH: chain_hash)
            page i   = by_hash[key[i]], accepted when its row holds the request's page i and its
                       parent class is the class of page i-1 (the root's at block 0); else the walk ends
        """
        c = self.page_size
        if not pages:
            return [], ROOT_HASH
        by_hash, sealed = self.by_hash, self.sealed
        rows, cls, pcls = sealed.rows, sealed.cls, sealed.pcls
        size = len(cls) - 1  # (a page past the rows has none: never sealed)
        request = np.frombuffer(tokens, dtype=np.uint64, count=pages * c).reshape(pages, c)
        data, width = request.tobytes(), 8 * c
        h, parent, out, at = ROOT_HASH, ROOT_CLASS, [], 0
        for d in chainhash.page_digests(request).tolist():  # every page's digest at once (most walks stop early,
            key = (K * h + d) & MASK                          # but one product costs what one page's does)
            pid = by_hash.get(key, size)
            if pid >= size or pcls.item(pid) != parent or rows[pid].tobytes() != data[at:at + width]:
                break
            out.append(pid)
            h, parent = key, cls.item(pid)
            at += width
        return out, h

    def _continues(self, pid: int, last: int) -> bool:
        """Whether page ``pid`` continues exactly the prefix ending with sealed page ``last``."""
        parent = self.kids.info[pid][1]
        if parent == last:
            return True
        return parent >= 0 and last >= 0 and bool(self.sealed.cls[parent] == self.sealed.cls[last])

    def chain(self, tokens: Sequence[int]) -> list[int]:
        """The hash-only walk: the same keys, one dict lookup each, up to the first key not indexed;
        nothing verified (the benchmark's baseline)."""
        n = len(tokens) // self.page_size
        if not n:
            return []
        got = list(map(self.by_hash.get, self._keys(token_array(tokens), n)[1].tolist()))
        return got[:got.index(None)] if None in got else got  # type: ignore[return-value]
