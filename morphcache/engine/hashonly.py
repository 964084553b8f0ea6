"""The unsafe mode's prefix table: hash -> GPU slot, as a hash-only prefix cache keeps it.

It remembers where each sealed page was when its sequence finished and never hears about what the
tiers do afterwards (offload, slot reuse, window release, corruption).  A hit is trusted as
readable::

    C = 4       page 0       page 1       page 2 (sealed, tokens a b c d)
    request     w x y z  |   1 2 3 4  |   a b Q ...
    table       h0 -> 7      h1 -> 2      parent h1: (slot 9, a b c d)
    hit         slots (7, 2), partial slot 9 with 2 tokens  = 10 tokens

Chain hashes are the runtime's (``morphcache.runtime.index.chain_hash``), so the nominal hit is the
one the runtime's index would report on the same pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from morphcache.runtime.index import ROOT_HASH, chain_hash


@dataclass(frozen=True)
class HashOnlyHit:
    """Slots of the whole hit pages, then optionally a partly matched page."""

    slots: tuple[int, ...]
    partial_slot: int | None
    partial_len: int

    def tokens(self, page_size: int) -> int:
        """Hit length in tokens."""
        return len(self.slots) * page_size + self.partial_len


class HashOnlyIndex:
    """``chain hash -> slot`` of sealed pages, and ``parent hash -> {slot: tokens}`` for partial hits."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.by_hash: dict[int, int] = {}
        self.by_parent: dict[int, dict[int, tuple[int, ...]]] = {}

    def record(self, pages: Sequence[tuple[Sequence[int], int]]) -> None:
        """Remember a finished sequence's sealed pages: ``(tokens, slot)`` in block order (stops at the
        first page that is not full).  A newer page with a known hash replaces the older slot."""
        h = ROOT_HASH
        for tokens, slot in pages:
            if len(tokens) != self.page_size or slot < 0:
                break
            self.by_parent.setdefault(h, {})[slot] = tuple(tokens)
            h = chain_hash(h, list(tokens))
            self.by_hash[h] = slot

    def lookup(self, tokens: Sequence[int], limit: int) -> HashOnlyHit:
        """The longest remembered prefix of ``tokens`` (at most ``limit`` tokens)."""
        c = self.page_size
        n = min(limit, len(tokens))
        h = ROOT_HASH
        slots: list[int] = []
        i = 0
        while i + c <= n:
            h2 = chain_hash(h, list(tokens[i:i + c]))
            slot = self.by_hash.get(h2)
            if slot is None:
                break
            slots.append(slot)
            h, i = h2, i + c
        rest = tokens[i:min(n, i + c)]
        best, best_len = None, 0
        for slot, stored in self.by_parent.get(h, {}).items():
            m = 0
            while m < min(len(rest), c - 1) and rest[m] == stored[m]:
                m += 1
            if m > best_len:
                best, best_len = slot, m
        return HashOnlyHit(tuple(slots), best, best_len)
