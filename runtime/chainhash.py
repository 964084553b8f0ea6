"""Chain hashes of whole pages: one page's at a seal, every page's of a request at once.

A page's digest mixes each token with constants of its column and sums the mixes with odd weights;
pages chain by a multiply-add, so the keys of a whole request are a cumulative sum (C = page size,
all arithmetic mod 2**64, K odd)::

    tokens    t[0] .. t[C-1] | t[C] .. t[2C-1] | ...          one row of C tokens per page
    mix       x[i,j] = xs(t[i,j] * A[j])                       xs(x) = x ^ (x >> 32), A[j] odd
    digest    d[i]   = sum_j x[i,j] * B[j]                     B[j] odd
    chain     h[i]   = K * h[i-1] + d[i],   h[-1] = ROOT_HASH
                     = K**(i+1) * (ROOT_HASH + sum_{j<=i} K**-(j+1) * d[j])   (K invertible: odd)

    request   [ page 0 | page 1 | page 2 | page 3 | tail ]
    rows      (4, C) view of the token array (no copy); d in four array operations, h in three

Tokens differing in one position always give different digests (a token's mix is a bijection of
it, multiplied by an odd weight), so two pages collide only through two or more differences; the
chain is a 64-bit hash, not a cryptographic one: keys can collide.  The index never
trusts a key alone: it compares the hit pages' stored tokens and chains (``index.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

ROOT_HASH = 0x6D6F_7270_6863_6163  # "morphcac"
MASK = (1 << 64) - 1
K = 0x9E37_79B9_7F4A_7C15  # odd: the chain multiplier
K_INV = pow(K, -1, 1 << 64)


def _splitmix(seed: int, n: int) -> list[int]:
    """``n`` odd 64-bit constants from a splitmix64 sequence."""
    out = []
    for _ in range(n):
        seed = (seed + 0x9E37_79B9_7F4A_7C15) & MASK
        z = seed
        z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & MASK
        out.append((z ^ (z >> 31)) | 1)
    return out


@lru_cache(maxsize=16)
def _columns(c: int) -> tuple[tuple[int, ...], tuple[int, ...], np.ndarray, np.ndarray]:
    """The per-column constants A and B of a page of ``c`` tokens (Python ints and uint64 arrays)."""
    a, b = _splitmix(0x6D69_780A, c), _splitmix(0x7765_6967_6874, c)
    return tuple(a), tuple(b), np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)


class _Powers:
    """``K**(i+1)`` and ``K**-(i+1)`` for i < n, grown by doubling (replaced whole: thread-safe reads)."""

    def __init__(self) -> None:
        self.tables: tuple[np.ndarray, np.ndarray] = self._build(1024)

    @staticmethod
    def _build(n: int) -> tuple[np.ndarray, np.ndarray]:
        up, down = [K], [K_INV]
        for _ in range(n - 1):
            up.append(up[-1] * K & MASK)
            down.append(down[-1] * K_INV & MASK)
        return np.array(up, dtype=np.uint64), np.array(down, dtype=np.uint64)

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        tables = self.tables
        if len(tables[0]) < n:
            size = len(tables[0])
            while size < n:
                size *= 2
            self.tables = tables = self._build(size)
        return tables[0][:n], tables[1][:n]


_POWERS = _Powers()


class Scratch:
    """Work arrays of one caller, reused from call to call and grown to the largest request: a large
    temporary allocated afresh is mapped and faulted in afresh on every call."""

    def __init__(self) -> None:
        self.words = (np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64))
        self.flags = np.empty(0, dtype=bool)

    def get(self, pages: int, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Two uint64 arrays and a bool array of shape ``(pages, c)`` (contents undefined)."""
        n = pages * c
        if len(self.flags) < n:
            size = max(n, 2 * len(self.flags))
            self.words = (np.empty(size, dtype=np.uint64), np.empty(size, dtype=np.uint64))
            self.flags = np.empty(size, dtype=bool)
        x, y = self.words
        return x[:n].reshape(pages, c), y[:n].reshape(pages, c), self.flags[:n].reshape(pages, c)


def page_digests(rows: np.ndarray, scratch: Scratch | None = None) -> np.ndarray:
    """The digest of each row of ``rows`` (pages x C tokens, uint64), as a fresh uint64 array."""
    _, _, a, b = _columns(rows.shape[1])
    if scratch is None:
        x = rows * a
        x ^= x >> np.uint64(32)
    else:
        x, tmp, _ = scratch.get(*rows.shape)
        np.multiply(rows, a, out=x)
        np.right_shift(x, np.uint64(32), out=tmp)
        x ^= tmp
    return x @ b  # type: ignore[no-any-return]


def chain_keys(rows: np.ndarray, root: int = ROOT_HASH, scratch: Scratch | None = None) -> np.ndarray:
    """The chain hash of every whole page of ``rows`` (pages x C tokens, uint64) after a page with
    hash ``root``: ``h[i] = K * h[i-1] + d[i]``, as one cumulative sum (work arrays from ``scratch``)."""
    up, down = _POWERS.get(len(rows))
    s = page_digests(rows, scratch)
    s *= down
    if len(s):
        s[0] = (int(s[0]) + root) & MASK
    np.cumsum(s, out=s)
    s *= up
    return s


def page_digest(tokens: Sequence[int]) -> int:
    """The digest of one page (Python ints: the same value as ``page_digests`` on its row)."""
    a, b, _, _ = _columns(len(tokens))
    acc = 0
    for t, ma, mb in zip(tokens, a, b, strict=True):
        x = t * ma & MASK
        acc += (x ^ (x >> 32)) * mb
    return acc & MASK


def chain_hash(parent: int, tokens: Sequence[int]) -> int:
    """The chain hash of a page holding ``tokens`` after a page with hash ``parent`` (what
    ``chain_keys`` gives that page)."""
    return (K * parent + page_digest(tokens)) & MASK
