"""Leases: a reader's promise that pages stay readable until it lets go (the values handed out).

A lease pins whole readable pages (spec ``acquire``) and, for a sequence's own lease, its partial
last page (spec ``acquire_tail``).  A lookup hit that ends inside another reader's page does not pin
that page: its first tokens are copied under the lock at lookup time and carried by the lease::

    C = 4, hit of 10 tokens:   [ page 0 ][ page 1 ][ a b . . ]
    lease.pages                  pinned    pinned
    lease.partial                                  tokens (a, b) + their payload, copied
    lease.tokens = 10

    acquire("s"), frontier 10: [ page 0 ][ page 1 ][ a b . . ]   (s's own pages)
    lease.pages                  pinned    pinned
    lease.tail                                     pinned (acquire_tail)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .sparse import frozen

_IDS = itertools.count(1)


@dataclass(frozen=True)
class PartialSnapshot:
    """The first tokens of a partly matched page, copied while it was validated."""

    block: int
    source: int
    tokens: tuple[int, ...]
    payload: bytes


@dataclass(frozen=True)
class ReadView:
    """What a validated read sees: GPU slots and generations of the leased pages (block order, the
    tail last), and their payloads when asked for."""

    lease_id: int
    slots: tuple[int, ...]
    generations: tuple[int, ...]
    payloads: tuple[bytes, ...] | None


class Lease:
    """Pins ``pages`` (block order) at ``generations`` and, when set, the reader's partial last page
    ``tail``; covers ``tokens`` tokens of a prefix.  ``reader`` is the spec reader holding the pins.
    ``page_ids`` and ``generation_ids`` are the same as read-only int64 arrays (what the batches take);
    the tuples are made from them on first use."""

    __slots__ = ("lease_id", "issuer", "owner", "reader", "_pages", "_generations", "tokens", "partial", "tail",
                 "tail_generation", "released", "page_ids", "generation_ids", "passed")

    def __init__(self, issuer: int, owner: str | None, reader: int, page_ids: np.ndarray,
                 generation_ids: np.ndarray, tokens: int, partial: PartialSnapshot | None = None,
                 tail: int | None = None, tail_generation: int | None = None) -> None:
        self.lease_id = next(_IDS)
        self.issuer = issuer
        self.owner = owner
        self.reader = reader
        self.tokens = tokens
        self.partial = partial
        self.tail = tail
        self.tail_generation = tail_generation
        self.released = False
        self.passed: int | None = None  # the pipeline's version when ``read`` last passed on every page
        self._pages: tuple[int, ...] | None = None
        self._generations: tuple[int, ...] | None = None
        self.page_ids = frozen(page_ids)
        self.generation_ids = frozen(generation_ids)

    @property
    def pages(self) -> tuple[int, ...]:
        """The whole pages pinned, in block order."""
        if self._pages is None:
            self._pages = tuple(self.page_ids.tolist())
        return self._pages

    @property
    def generations(self) -> tuple[int, ...]:
        """Each whole page's generation when it was pinned."""
        if self._generations is None:
            self._generations = tuple(self.generation_ids.tolist())
        return self._generations

    @property
    def pinned(self) -> tuple[int, ...]:
        """Every page the lease pins: its whole pages, then its tail."""
        return self.pages + ((self.tail,) if self.tail is not None else ())

    @property
    def pinned_ids(self) -> np.ndarray:
        """``pinned`` as an array."""
        return self.page_ids if self.tail is None else np.append(self.page_ids, self.tail)

    def __repr__(self) -> str:
        state = "released" if self.released else "live"
        return f"Lease(#{self.lease_id}, {len(self.pages)} pages, {self.tokens} tokens, {state})"
