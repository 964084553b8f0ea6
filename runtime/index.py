"""The prefix index: chain hashes of sealed pages, and the nominal hit of a token sequence.

Pages chain by hash, as in vLLM: ``h(p) = xxh3(tokens of page p, seed = h(p-1))`` with a fixed root.
The nominal hit walks the request page by page through the index, then compares the request's
remaining tokens with the stored tokens of the cached pages that continue the chain (sealed or still
filling), so a hit can end in the middle of a page::

    C = 4          page 0        page 1        page 2 (cached, tokens a b c d)
    request        w x y z   |   1 2 3 4   |   a b Q ...
    full pages     hit            hit           -- hash differs
    partial                                     lcp("a b Q ..", "a b c d") = 2
    nominal        4 + 4 + 2 = 10 tokens
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import xxhash

ROOT_HASH = 0x6D6F_7270_6863_6163  # "morphcac"


def token_array(tokens: Sequence[int]) -> array[int]:
    """Tokens as unsigned 64-bit ints (the bytes the chain hash reads)."""
    return tokens if isinstance(tokens, array) and tokens.typecode == "Q" else array("Q", tokens)


def chain_hash(parent: int, tokens: Sequence[int]) -> int:
    """The chain hash of a page holding ``tokens`` after a page with hash ``parent``: xxh3-64 of the
    tokens' bytes, seeded with the parent's hash."""
    return int(xxhash.xxh3_64_intdigest(token_array(tokens), seed=parent))


@dataclass(frozen=True)
class NominalHit:
    """Pages of the nominal hit: ``full`` whole pages, then optionally ``partial`` with ``partial_len``
    matching tokens; ``tokens`` is the nominal hit length."""

    full: tuple[int, ...]
    partial: int | None
    partial_len: int
    tokens: int

    @property
    def pages(self) -> tuple[int, ...]:
        """Every page the hit touches, in block order."""
        return self.full + ((self.partial,) if self.partial is not None else ())


class PrefixIndex:
    """``hash -> page`` for sealed pages and ``parent hash -> pages`` for partial matches."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.by_hash: dict[int, int] = {}
        self.by_parent: dict[int, dict[int, list[int]]] = {}  # parent hash -> {pid: tokens}

    def add_child(self, parent_hash: int, pid: int, tokens: list[int]) -> None:
        """Make page ``pid`` (tokens still growing) a candidate continuation of ``parent_hash``."""
        self.by_parent.setdefault(parent_hash, {})[pid] = tokens

    def remove_child(self, parent_hash: int, pid: int) -> None:
        """Forget ``pid`` as a continuation."""
        kids = self.by_parent.get(parent_hash)
        if kids is not None:
            kids.pop(pid, None)
            if not kids:
                del self.by_parent[parent_hash]

    def add_sealed(self, h: int, pid: int) -> bool:
        """Index a sealed page under its chain hash; False if another page already has that hash."""
        if h in self.by_hash:
            return False
        self.by_hash[h] = pid
        return True

    def remove_sealed(self, h: int, pid: int) -> None:
        """Drop the index entry of ``pid`` (only if it is the indexed page for ``h``)."""
        if self.by_hash.get(h) == pid:
            del self.by_hash[h]

    def nominal(self, tokens: Sequence[int], limit: int | None = None) -> NominalHit:
        """The longest cached prefix of ``tokens`` (at most ``limit`` tokens)."""
        c = self.page_size
        n = len(tokens) if limit is None else min(limit, len(tokens))
        buf = memoryview(token_array(tokens)).cast("B")
        digest = xxhash.xxh3_64_intdigest
        h = ROOT_HASH
        full: list[int] = []
        get, keep, step = self.by_hash.get, full.append, 8 * c
        for k in range(0, (n // c) * step, step):  # byte offsets of the whole pages
            h2 = digest(buf[k:k + step], h)
            pid = get(h2)
            if pid is None:
                break
            keep(pid)
            h = h2
        i = len(full) * c
        best, best_len = None, 0
        rest = tokens[i:min(n, i + c)]
        first = rest[0] if rest else None
        for pid, stored in self.by_parent.get(h, {}).items() if rest else ():
            if not stored or stored[0] != first:
                continue
            m = 0
            top = min(len(rest), len(stored))
            while m < top and rest[m] == stored[m]:
                m += 1
            m = min(m, c - 1)
            if m > best_len:
                best, best_len = pid, m
        return NominalHit(tuple(full), best, best_len, i + best_len)

    def chain(self, tokens: Sequence[int]) -> list[int]:
        """The hash-only walk: page ids of the indexed whole-page prefix, nothing validated (the
        benchmark's baseline)."""
        c = self.page_size
        buf = memoryview(token_array(tokens)).cast("B")
        digest = xxhash.xxh3_64_intdigest
        h = ROOT_HASH
        out: list[int] = []
        for i in range(0, len(tokens) - c + 1, c):
            h = digest(buf[i * 8:(i + c) * 8], seed=h)
            pid = self.by_hash.get(h)
            if pid is None:
                break
            out.append(pid)
        return out
