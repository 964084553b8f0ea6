"""The index's ``chain hash -> page`` entries as a two-choice (cuckoo) table in two numpy arrays, so a
whole request's keys are looked up with a fixed handful of array operations (no Python int per key,
no probe loop).

A key lives in one of its two slots, ``hi`` (its top bits) or ``lo`` (the top bits of the key times
an odd constant M, mod 2**64); an insertion that finds both taken moves the occupant of one to that
occupant's other slot, and so on::

    slot      0     1     2     3     4     5     6     7        cap = 8 (a power of two), 3 live
    keys      v0    h9    h2    v3    v4    h1    v6    v7       hi(h) = h >> 61, lo(h) = (h * M) >> 61
    pages     -1    12    7     -1    -1    3     -1    -1       -1 empty
    find(h2)  hi(h2) = 2: keys[2] == h2 -> page 7
    find(h4)  hi(h4) = 5: h1 != h4; lo(h4) = 3: v3 != h4 -> absent (-1)

An empty slot s holds a key v_s whose own ``hi`` slot is not s, so a key found at its ``hi`` slot is
live there; a key matched at its ``lo`` slot is checked against the page (-1: absent).

A lookup may skip the last check (``candidates``): a key absent from the table then yields the page
of its ``lo`` slot, which the index's verification refuses unless it holds exactly the request's
prefix.  The table stays at most 40% full (small, for a lookup's gathers, but well below the 50% a
two-choice table fills up to), so an insertion seldom moves anything; one that cannot settle in a
few moves rebuilds the table twice as large.  It mirrors
``PrefixIndex.by_hash`` (the dict stays the reference the rest of the runtime reads); ``problems``
checks the two agree.
"""

from __future__ import annotations

from array import array

import numpy as np

EMPTY = -1
LOOP_UP_TO = 96  # fewer keys to remove: one at a time (~0.3 us a key; numpy: ~25 us + ~0.1 us a key)
MOVES = 32  # moves an insertion may make before the table grows
M = 0xD6E8_FEB8_6659_FD93  # odd: the multiplier of the lo slot


class KeyTable:
    """``key -> page id`` for uint64 keys, looked up many at once."""

    def __init__(self, bits: int = 10) -> None:
        self._alloc(bits)

    def _alloc(self, bits: int) -> None:
        self.bits = bits
        self.shift = np.uint64(64 - bits)
        self.um = np.uint64(M)
        # the slots as arrays of machine ints (an insertion's scalar reads and writes) viewed by numpy
        self.key_slots = array("Q", bytes(8 << bits))
        self.page_slots = array("q", [EMPTY]) * (1 << bits)
        self.keys = np.frombuffer(self.key_slots, dtype=np.uint64)
        self.pages = np.frombuffer(self.page_slots, dtype=np.int64)
        self.keys[:] = (np.arange(1 << bits, dtype=np.uint64) ^ np.uint64(1)) << self.shift  # empty: _vacant
        self.live = 0

    def _slots(self, key: int) -> tuple[int, int]:
        shift = 64 - self.bits
        return key >> shift, ((key * M) & 0xFFFF_FFFF_FFFF_FFFF) >> shift

    def _vacant(self, pos: int) -> int:
        """The key an empty slot holds: one whose ``hi`` slot is another (so ``find`` never stops there)."""
        return (pos ^ 1) << (64 - self.bits)

    def add(self, key: int, pid: int) -> None:
        """Enter ``key -> pid`` (``key`` must not be in the table)."""
        if 5 * (self.live + 1) > 2 * len(self.pages):
            self._rebuild(self.bits + 1, [])
        homeless = self._place(key, pid)
        if homeless is not None:
            self._rebuild(self.bits + 1, [homeless])
        self.live += 1

    def add_many(self, keys: list[int], pids: list[int]) -> None:
        """``add(key, pid)`` for each of ``keys`` and ``pids``, in order: a key whose own two slots are both
        taken goes through ``_place`` (its moves), a table due to grow (or a key left homeless) as ``add``
        grows it; the free-slot case, most keys, in line."""
        shift, mask = 64 - self.bits, (1 << 64) - 1
        slot_keys, slot_pages, room, live = self.key_slots, self.page_slots, 2 * len(self.page_slots), self.live
        for key, pid in zip(keys, pids, strict=True):
            if 5 * (live + 1) <= room:
                at = key >> shift
                if slot_pages[at] < 0:
                    slot_keys[at], slot_pages[at] = key, pid
                    live += 1
                    continue
                lo = ((key * M) & mask) >> shift
                if slot_pages[lo] < 0:
                    slot_keys[lo], slot_pages[lo] = key, pid
                    live += 1
                    continue
                homeless = self._place(key, pid)
                if homeless is None:
                    live += 1
                    continue
                self.live = live
                self._rebuild(self.bits + 1, [homeless])  # the table grows with it
                self.live += 1
            else:
                self.live = live
                self.add(key, pid)  # (it grows the table)
            shift, slot_keys, slot_pages = 64 - self.bits, self.key_slots, self.page_slots  # its slots read again
            room, live = 2 * len(slot_pages), self.live
        self.live = live

    def _place(self, key: int, pid: int) -> tuple[int, int] | None:
        """Put ``key -> pid`` in one of its slots, moving occupants to their other slots; the entry left
        without a slot after ``MOVES`` moves (every other entry is in the table), or None."""
        keys, pages = self.key_slots, self.page_slots
        hi, lo = self._slots(key)
        for pos in (hi, lo):
            if pages[pos] < 0:
                keys[pos], pages[pos] = key, pid
                return None
        pos = hi
        for _ in range(MOVES):
            evicted = keys[pos], pages[pos]
            keys[pos], pages[pos] = key, pid
            key, pid = evicted
            hi, lo = self._slots(key)
            pos = lo if pos == hi else hi
            if pages[pos] < 0:
                keys[pos], pages[pos] = key, pid
                return None
        return key, pid

    def remove(self, key: int) -> None:
        """Remove ``key`` (nothing if absent)."""
        keys, pages = self.key_slots, self.page_slots
        for pos in self._slots(key):
            if pages[pos] >= 0 and keys[pos] == key:
                keys[pos], pages[pos] = self._vacant(pos), EMPTY
                self.live -= 1
                return

    def remove_many(self, keys: list[int]) -> None:
        """``remove`` for each of ``keys`` (distinct; nothing for one absent): fewer than ``LOOP_UP_TO`` one
        at a time by scalar reads and writes of the slots, more by one vector pass."""
        if len(keys) < LOOP_UP_TO:  # scalar reads and writes of the slot arrays, inlined
            slot_keys, slot_pages, shift, mask = self.key_slots, self.page_slots, 64 - self.bits, (1 << 64) - 1
            for key in keys:
                at = key >> shift
                if slot_pages[at] < 0 or slot_keys[at] != key:
                    at = ((key * M) & mask) >> shift
                    if slot_pages[at] < 0 or slot_keys[at] != key:
                        continue
                slot_keys[at], slot_pages[at] = (at ^ 1) << shift, EMPTY  # _vacant
                self.live -= 1
            return
        ks = np.array(keys, dtype=np.uint64)
        hi, lo = ks >> self.shift, (ks * self.um) >> self.shift
        keys_at, pages = self.keys, self.pages
        at_hi = (keys_at[hi] == ks) & (pages[hi] >= 0)
        at_lo = ~at_hi & (keys_at[lo] == ks) & (pages[lo] >= 0)
        pos = np.concatenate([hi[at_hi], lo[at_lo]])
        keys_at[pos] = (pos ^ np.uint64(1)) << self.shift  # _vacant
        pages[pos] = EMPTY
        self.live -= len(pos)

    def _rebuild(self, bits: int, extra: list[tuple[int, int]]) -> None:
        """Re-enter the live entries and ``extra`` into a table of ``2**bits`` slots (more if they do not
        settle)."""
        live = self.pages >= 0
        keys = np.concatenate([self.keys[live], np.array([k for k, _ in extra], dtype=np.uint64)])
        pids = np.concatenate([self.pages[live], np.array([p for _, p in extra], dtype=np.int64)])
        while True:
            self._alloc(bits)
            if self._place_all(keys, pids):
                self.live = len(keys) - len(extra)
                return
            bits += 1

    def _place_all(self, keys: np.ndarray, pids: np.ndarray) -> bool:
        """Enter ``keys -> pids`` (distinct keys) into this empty table: each key at its ``hi`` slot
        when it is the first to claim it, then at its free ``lo`` slot likewise, the rest one by one;
        False if one finds no slot."""
        rest = np.arange(len(keys))
        for slots in (keys >> self.shift, (keys * self.um) >> self.shift):
            at = slots[rest]
            free = self.pages[at] < 0
            taken, first = np.unique(at[free], return_index=True)
            chosen = rest[free][first]
            self.keys[taken], self.pages[taken] = keys[chosen], pids[chosen]
            left = np.ones(len(keys), dtype=bool)
            left[chosen] = False
            rest = rest[left[rest]]
        return all(self._place(key, pid) is None
                   for key, pid in zip(keys[rest].tolist(), pids[rest].tolist(), strict=True))

    def candidates(self, keys: np.ndarray) -> np.ndarray:
        """For each of ``keys`` (uint64): its page where it is in the table, elsewhere the page of its
        ``lo`` slot or -1 (an int64 array; what the caller verifies on the pages' tokens)."""
        hi = keys >> self.shift
        slot = np.where(self.keys.take(hi) == keys, hi, (keys * self.um) >> self.shift)
        return self.pages.take(slot)  # type: ignore[no-any-return]

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The page id of each of ``keys`` (uint64), -1 where absent (an int64 array)."""
        out = self.candidates(keys)
        lo = (keys * self.um) >> self.shift
        out[(self.keys.take(keys >> self.shift) != keys) & (self.keys.take(lo) != keys)] = EMPTY
        return out

    def problems(self, entries: dict[int, int]) -> list[str]:
        """Disagreements with ``entries`` (the reference ``key -> page``); empty when they agree."""
        out = []
        if self.live != len(entries) or int((self.pages >= 0).sum()) != self.live:
            out.append(f"key table holds {self.live} entries, the index {len(entries)}")
        if entries:
            keys = np.fromiter(entries, dtype=np.uint64, count=len(entries))
            got = self.find(keys).tolist()
            for (key, pid), seen in zip(entries.items(), got, strict=True):
                if seen != pid:
                    out.append(f"key table maps {key:x} to {seen}, the index to page {pid}")
        return out
