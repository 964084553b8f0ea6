"""The data plane behind the GPU pool: a pluggable ``PageStore`` and the default in-memory one.

The runtime is the control plane (ids, states, leases, tiers).  Whatever holds the KV bytes plugs in
here; the runtime calls it only for pages whose state allows it.  A page's payload is addressed by
its GPU *slot* (the block-table entry the kernels use)::

    slot 5 : [ token 0 | token 1 | ... | token C-1 ]   page_bytes = C * TOKEN_BYTES (default store)

The default ``MemoryPageStore`` keeps a deterministic payload per token (the token id and a mix of
its position), so the control-plane replay and the tests run without tensors and can check every
byte a reader sees.  A tensor store (the model engine's) implements the same calls with the kernels'
store / compress / copy launchers.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import xxhash

TOKEN_BYTES = 8


# ``checksum(data)``: the content checksum of a payload (xxh3, 64 bit, an int): the hash's own call, no
# Python frame a page (every page offloaded, spilled or landed is checksummed)
checksum: Callable[[bytes], int] = xxhash.xxh3_64_intdigest


_PACK = struct.Struct("<II").pack
MIX, LOW = 2654435761, 0xFFFFFFFF  # a token's high word: (position * MIX + token) & LOW; its low word token & LOW
_LOW, _MIX, _HIGH = np.uint64(LOW), np.uint64(MIX), np.uint64(32)


def token_payload(token: int, position: int) -> bytes:
    """The default store's bytes for ``token`` at absolute ``position``."""
    return _PACK(token & LOW, (position * MIX + token) & LOW)


def expected_payload(tokens: Sequence[int], depth: int, page_size: int) -> bytes:
    """The default store's payload of a page at block ``depth`` holding ``tokens`` (zero-padded)."""
    base = depth * page_size
    body = b"".join(token_payload(t, base + i) for i, t in enumerate(tokens))
    return body + bytes(page_size * TOKEN_BYTES - len(body))


class PageStore(Protocol):
    """What the runtime asks of the GPU pool's data plane.  Calls for one slot never overlap."""

    page_bytes: int

    def write_tokens(self, slot: int, depth: int, offset: int, tokens: Sequence[int]) -> None:
        """Store the KV of ``tokens`` at offsets ``offset..`` of the page at block ``depth``."""

    def compress(self, slot: int) -> None:
        """Build the page's compressed entry and its indexer keys from its raw KV."""

    def read(self, slot: int) -> bytes:
        """The page's payload (to move it to another tier)."""

    def write(self, slot: int, data: bytes) -> None:
        """Put a payload back into ``slot`` (a prefetch landing)."""

    def recompute(self, slot: int, depth: int, tokens: Sequence[int]) -> None:
        """Rebuild the page's KV from its tokens (a prefill of the page)."""

    def read_prefix(self, slot: int, count: int) -> bytes:
        """The payload of the first ``count`` tokens of the page (copy-on-write source)."""

    def write_prefix(self, slot: int, count: int, data: bytes) -> None:
        """Put ``data`` (from ``read_prefix``) as the first ``count`` tokens of the page in ``slot``."""

    # optional: write_tokens_many(slots, depths, offsets, tokens), one token into each of many slots
    # (numpy int64 arrays); the runtime calls write_tokens per slot when a store lacks it.  Optional
    # too: free_many(slots), ``free`` of each of many slots (a list); else ``free`` per slot; and
    # write_run(slots, depth, offset, tokens), a run of tokens over pages that follow one another; and
    # read_many(slots), ``read`` of each of many slots (a list), in order

    def free(self, slot: int) -> None:
        """The slot no longer holds a page."""

    def set_generation(self, slot: int, gen: int) -> None:
        """Publish the page generation the read kernels compare leases with."""


class MemoryPageStore:
    """Default store: the deterministic per-token payload of every slot, in one numpy array.

    ``write_tokens_many`` writes one token into each of many slots (a decode step) in one pass,
    ``free_many`` frees many slots (a room's victims) at once.
    """

    def __init__(self, slots: int, page_size: int) -> None:
        self.page_size = page_size
        self.page_bytes = page_size * TOKEN_BYTES
        self.buf = np.zeros((slots, self.page_bytes), dtype=np.uint8)
        self.words = self.buf.view(np.uint32).reshape(slots, page_size, 2)
        self.entries = self.buf.view("<u8").reshape(slots, page_size)  # one token entry a word
        # the same bytes as one flat memoryview, and each slot's row as a memoryview of its own: a whole
        # slot read, written or cleared by one slice (a fraction of a numpy row's indexing, for the moves
        # that copy one page at a time)
        self._flat = memoryview(self.buf.reshape(-1))  # type: ignore[arg-type]
        size = self.page_bytes
        self._rows = [self._flat[at:at + size] for at in range(0, slots * size, size)]
        self._zero = bytes(self.page_bytes)
        self._flags = bytearray(slots)  # ``used`` as bytes: one slot's flag read or set without numpy
        self.used = np.frombuffer(self._flags, dtype=bool)  # (the same memory: the batch writes index it)
        self.generations = [0] * slots
        # ``set_generation(slot, gen)``: the list's own item write (a generation published on every
        # open, move and landing: no Python frame a call)
        self.set_generation: Callable[[int, int], None] = self.generations.__setitem__
        self.compressed = [False] * slots
        self._lock = threading.Lock()
        self._mixed = np.zeros(0, dtype=np.uint64)  # position * MIX of positions 0.. (mod 2**64), grown on demand

    def write_tokens(self, slot: int, depth: int, offset: int, tokens: Sequence[int]) -> None:
        """Store the payload of ``tokens`` at offsets ``offset..``."""
        self._flags[slot] = 1
        base = depth * self.page_size + offset
        n = len(tokens)
        if n >= 8:  # column-wise, as ``write_tokens_many`` (numpy's fixed cost pays off from a few tokens)
            try:
                tok = np.asarray(tokens, dtype=np.int64).view(np.uint64)
            except OverflowError:
                tok = None
            if tok is not None:
                pos = np.arange(base, base + n, dtype=np.uint64)
                words = self.words[slot, offset: offset + n]
                words[:, 0] = tok & _LOW
                words[:, 1] = (pos * _MIX + tok) & _LOW
                return
        if n == 1:
            chunk = token_payload(tokens[0], base)
        else:
            chunk = b"".join([token_payload(t, base + i) for i, t in enumerate(tokens)])
        if offset + n > self.page_size:
            raise ValueError(f"{n} tokens from offset {offset} overrun a page of {self.page_size}")
        start = slot * self.page_bytes + offset * TOKEN_BYTES
        self._flat[start: start + len(chunk)] = chunk  # (a slice of the flat bytes: no numpy row a call)

    def write_tokens_many(self, slots: np.ndarray, depths: np.ndarray, offsets: np.ndarray,
                          tokens: np.ndarray) -> None:
        """One token into each of many slots: ``tokens[i]`` at ``offsets[i]`` of the page at block
        ``depths[i]`` in ``slots[i]`` (the payload ``token_payload`` gives, column-wise)."""
        tok = tokens.astype(np.uint64, copy=False)
        pos = depths * self.page_size + offsets
        pos = pos.view(np.uint64) if pos.dtype == np.int64 else pos.astype(np.uint64)  # non-negative: the same
        self.used[slots] = True
        # both little-endian words of each entry in one 64-bit write: low = token, high = position mix
        # (the shift drops the mix's high word)
        self.entries[slots, offsets] = (tok & _LOW) | ((pos * _MIX + tok) << _HIGH)

    def write_run(self, slots: list[int], depth: int, offset: int, tokens: np.ndarray) -> None:
        """A run of ``tokens`` (uint64) over pages that follow one another: from offset ``offset`` of the
        page at block ``depth`` in ``slots[0]``, on through the page at block ``depth + i`` in
        ``slots[i]`` (the payload ``token_payload`` gives, column-wise, the pages' rows read and
        written back once)::

            C = 4, depth 3, offset 2:   slots[0] [ . . t0 t1 ]  slots[1] [ t2 t3 t4 t5 ]  slots[2] [ t6 . . . ]
        """
        n, c = len(tokens), self.page_size
        base = depth * c + offset
        mixed = self._mixed
        if len(mixed) < base + n:
            self._mixed = mixed = np.arange(max(base + n, 2 * len(mixed)), dtype=np.uint64) * _MIX
        entries = mixed[base:base + n] + tokens  # each position's mix plus its token, then the entries in place
        entries <<= _HIGH
        entries |= tokens & _LOW
        at = np.array(slots, dtype=np.intp)  # (an index array: a list is converted at each use)
        self.used[at] = True
        rows = self.entries
        if offset == 0 and n == len(slots) * c:  # whole pages
            rows[at] = entries.reshape(len(slots), c)
            return
        # the first page's part, the whole pages after it, the last page's part: each written in place
        head = min(n, c - offset)
        rows[slots[0], offset:offset + head] = entries[:head]
        whole = (n - head) // c
        if whole:
            rows[at[1:1 + whole]] = entries[head:head + whole * c].reshape(whole, c)
        tail = n - head - whole * c
        if tail:
            rows[slots[1 + whole], :tail] = entries[n - tail:]

    def compress(self, slot: int) -> None:
        """Mark the slot's compressed entry as built (no tensors in this store)."""
        self.compressed[slot] = True

    def read(self, slot: int) -> bytes:
        """A copy of the slot's payload; KeyError if the slot holds nothing."""
        if not self._flags[slot]:
            raise KeyError(f"GPU slot {slot} holds no page")
        return self._rows[slot].tobytes()

    def read_many(self, slots: list[int]) -> list[bytes]:
        """``read`` of each of ``slots``, in order (one loop over the rows, no call a slot); KeyError if
        one of them holds nothing."""
        flags, rows, out = self._flags, self._rows, []
        for slot in slots:
            if not flags[slot]:
                raise KeyError(f"GPU slot {slot} holds no page")
            out.append(rows[slot].tobytes())
        return out

    def write(self, slot: int, data: bytes) -> None:
        """Overwrite the slot with ``data`` (truncated or zero-padded to the page size)."""
        if len(data) == self.page_bytes and data.__class__ is bytes:  # a whole page (a landing's copy)
            self._rows[slot][:] = data
        else:
            chunk = np.frombuffer(data[: self.page_bytes], dtype=np.uint8)
            self.buf[slot] = 0
            self.buf[slot, : len(chunk)] = chunk
        self._flags[slot] = 1

    def recompute(self, slot: int, depth: int, tokens: Sequence[int]) -> None:
        """Rebuild the payload from the tokens: the slot's row of 64-bit entries written at once, each
        ``token_payload``'s two little-endian words (low = token, high = position mix), zero-padded."""
        c = self.page_size
        n = len(tokens)
        if n > c:
            self.write(slot, expected_payload(tokens, depth, c))
        else:
            base = depth * c
            row = [((((base + i) * MIX + t) & LOW) << 32) | (t & LOW) for i, t in enumerate(tokens)]
            if n < c:
                row += [0] * (c - n)
            self.entries[slot] = row
            self._flags[slot] = 1
        self.compressed[slot] = False

    def read_prefix(self, slot: int, count: int) -> bytes:
        """The first ``count`` token entries of the slot."""
        return self.read(slot)[: count * TOKEN_BYTES]

    def write_prefix(self, slot: int, count: int, data: bytes) -> None:
        """Write ``count`` token entries at the start of the slot."""
        chunk = bytes(data[: count * TOKEN_BYTES])
        if len(chunk) > self.page_bytes:
            raise ValueError(f"{count} tokens overrun a page of {self.page_size}")
        start = slot * self.page_bytes
        self._flat[start: start + len(chunk)] = chunk  # (a slice of the flat bytes: no numpy row a call)
        self._flags[slot] = 1

    def free(self, slot: int) -> None:
        """Drop the slot's payload."""
        self._rows[slot][:] = self._zero
        self._flags[slot] = 0
        self.compressed[slot] = False

    def free_many(self, slots: list[int]) -> None:
        """``free`` of each of ``slots`` (distinct), at once."""
        at = np.array(slots, dtype=np.intp)  # (an index array: a list is converted at each use)
        self.buf[at] = 0
        self.used[at] = False
        compressed = self.compressed
        for slot in slots:
            compressed[slot] = False

