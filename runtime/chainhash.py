"""Chain hashes of whole pages: one page's at a seal, every page's of a request at once.

A page's digest is its tokens weighted by odd per-column constants and summed; pages chain by a
multiply-add, so the keys of a whole request are one matrix-vector product and one cumulative sum
(C = page size, all arithmetic mod 2**64, K odd)::

    tokens    t[0] .. t[C-1] | t[C] .. t[2C-1] | ...          one row of C tokens per page
    digest    d[i] = sum_j t[i,j] * W[j]                       W[j] odd, one per column
    chain     h[i] = K * h[i-1] + d[i],   h[-1] = ROOT_HASH
                   = K**(i+1) * (ROOT_HASH + sum_{j<=i} K**-(j+1) * d[j])     (K odd: invertible)

    request   [ page 0 | page 1 | page 2 | page 3 | tail ]
    rows      (4, C) view of the token array (no copy)
    keys      d = rows @ W, then d * K**-(i+1), cumsum, + ROOT_HASH at the front, * K**(i+1)

Two pages differing in one token always differ in digest (the difference times an odd weight is
not 0 mod 2**64); pages differing in several collide for about one pair in 2**64 when the tokens do
not depend on W, and anyone who reads W can build a collision: the keys are a fast 64-bit hash, not
a cryptographic one.  Nothing relies on them being collision-free: the index never trusts a key
alone, it compares the hit pages' stored tokens and chains (``index.py``), so a collision costs a
hit, never serves another prefix's KV.  The seal's hash (``chain_hash``, one page) is one dot
product and the multiply-add in Python ints.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from functools import lru_cache
from operator import mul

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
def _weights(c: int) -> tuple[tuple[int, ...], np.ndarray]:
    """The per-column weights W of a page of ``c`` tokens (Python ints and a uint64 array)."""
    w = _splitmix(0x7765_6967_6874, c)
    return tuple(w), np.array(w, dtype=np.uint64)


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
_ACCUMULATE = np.add.accumulate


def page_digests(rows: np.ndarray) -> np.ndarray:
    """The digest of each row of ``rows`` (pages x C tokens, uint64), as a fresh uint64 array."""
    return rows @ _weights(rows.shape[1])[1]  # type: ignore[no-any-return]


def chain_keys(rows: np.ndarray, root: int = ROOT_HASH) -> np.ndarray:
    """The chain hash of every whole page of ``rows`` (pages x C tokens, uint64) after a page with
    hash ``root``: ``h[i] = K * h[i-1] + d[i]``, as one cumulative sum."""
    up, down = _POWERS.get(len(rows))
    s = page_digests(rows)
    s *= down
    if len(s):
        s[0] = (int(s[0]) + root) & MASK
    _ACCUMULATE(s, out=s)  # the cumulative sum (the ufunc's own accumulate: no method wrapper)
    s *= up
    return s


def page_digest(tokens: Sequence[int]) -> int:
    """The digest of one page (one dot product): what ``page_digests`` gives its row."""
    row = np.frombuffer(tokens if isinstance(tokens, array) and tokens.typecode == "Q" else array("Q", tokens),
                        dtype=np.uint64)
    return int(np.dot(row, _weights(len(tokens))[1]))


def chain_hash(parent: int, tokens: Sequence[int]) -> int:
    """The chain hash of a page holding ``tokens`` after a page with hash ``parent`` (what
    ``chain_keys`` gives that page)."""
    return (K * parent + page_digest(tokens)) & MASK


def chain_hashes(parents: Sequence[int], rows: np.ndarray) -> list[int]:
    """``chain_hash`` of many pages at once: page ``i`` holds row ``i`` of ``rows`` (pages x C tokens,
    uint64) after a page with hash ``parents[i]`` (one matrix-vector product for the digests)."""
    return [(K * parent + d) & MASK for parent, d in zip(parents, page_digests(rows).tolist(), strict=True)]


def run_keys(root: int, head: Sequence[int], tokens: Sequence[int], count: int, c: int) -> list[int]:
    """The chain hash of each of ``count`` pages of ``c`` tokens after a page with hash ``root``, their
    tokens ``head`` (a partial page's first ones) then ``tokens`` (a write's, as many as they take): one
    vector pass (``chain_keys``) over many pages, else ``chain_hash`` page by page (the same values)."""
    used = count * c - len(head)
    if count < 4:  # a few pages: each digest a sum of Python ints (what the dot product gives, mod 2**64)
        out, flat, w = [], list(head) + list(tokens[:used]), _weights(c)[0]
        for k in range(count):
            root = (K * root + sum(map(mul, flat[k * c:(k + 1) * c], w))) & MASK
            out.append(root)
        return out
    part = tokens[:used]
    if isinstance(part, list):  # Python ints: packed by array (faster than numpy's conversion of a list)
        packed = np.frombuffer(array("Q", list(head) + part if head else part), dtype=np.uint64)
    else:
        body = np.frombuffer(part, dtype=np.uint64) if isinstance(part, array) and part.typecode == "Q" else \
            np.array(part, dtype=np.uint64)
        packed = np.concatenate([np.array(head, dtype=np.uint64), body]) if len(head) else body
    return chain_keys(packed.reshape(count, c), root).tolist()  # type: ignore[no-any-return]
