"""Leases: a reader's promise that pages stay readable until it lets go.

Acquiring fires the spec's ``acquire`` on every whole page (pin + record the generation); each read
fires ``read`` (the guard re-validates pin, generation and readiness at the moment of use); release
fires ``release`` / ``release_last``.  A hit that ends inside a page does not pin that page: its
first tokens are copied under the lock at lookup time (copy-on-write) and carried by the lease::

    C = 4, hit of 10 tokens:   [ page 0 ][ page 1 ][ a b . . ]
    lease.pages                  pinned    pinned
    lease.partial                                  tokens (a, b) + their payload, copied
    lease.tokens = 10
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

_IDS = itertools.count(1)


@dataclass(frozen=True)
class PartialSnapshot:
    """The first tokens of a partly matched page, copied while it was validated."""

    block: int
    source: int
    tokens: tuple[int, ...]
    payload: bytes


class Lease:
    """Pins ``pages`` (block order) at ``generations``; covers ``tokens`` tokens of a prefix."""

    __slots__ = ("lease_id", "issuer", "owner", "pages", "generations", "tokens", "partial", "tail",
                 "released")

    def __init__(self, issuer: int, owner: str | None, pages: tuple[int, ...], generations: tuple[int, ...],
                 tokens: int, partial: PartialSnapshot | None = None, tail: int | None = None) -> None:
        self.lease_id = next(_IDS)
        self.issuer = issuer
        self.owner = owner
        self.pages = pages
        self.generations = generations
        self.tokens = tokens
        self.partial = partial
        self.tail = tail  # a sequence's own filling page (not pinned: the spec never moves a filling page)
        self.released = False

    def __repr__(self) -> str:
        state = "released" if self.released else "live"
        return f"Lease(#{self.lease_id}, {len(self.pages)} pages, {self.tokens} tokens, {state})"
