"""The effective hit: the largest position at or below the nominal hit where every needed object is
ready.

For each object ``k`` the spec gives ``needed[k](p, pos)``: page ``p`` must be ready for a hit at
``pos``.  These are compiled and sampled once into a *profile*: the offsets ``d = pos - p*C`` at
which page ``p`` is needed, as closed intervals (an end may be unbounded).  With the shipped spec,
C = 4 and W = 6::

    d = pos - p*C     ... -1  0  1  2  3  4  5  6  7  8  9 ...
    tail                        [1 ....... 3]                       p*C < pos < (p+1)*C
    window                      [1 .................... 9]          pos - W < (p+1)*C
    compressed, indexer                  [4 .............. inf)     (p+1)*C <= pos
    tier                        [1 ......................... inf)   p*C < pos

A page that is not ready for ``k`` forbids the positions ``p*C + profile[k]``; the effective hit is
the largest position in ``[0, nominal]`` outside the union of the forbidden intervals.  Readiness is
not monotonic in ``pos`` (an expired window forbids a band, not a suffix), so the union is searched
from the top, not cut at the first gap.  The profile is only used when sampling shows it is the same
for every page (translation-covariant) and constant beyond the sampled range; otherwise the search
evaluates ``needed`` at every position (slow, exact).

The module is a little longer than most: the profile, the search over it and the brute-force oracle
the tests hold it to read best together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import reduce
from operator import and_
from typing import Any

import numpy as np

from morphcache.spec.model import Lookup

from .compiler import CompiledLookup
from .errors import ConfigError
from .irtools import free_names

Masks = Sequence[int] | np.ndarray  # readiness bits per page: a list (closures) or an int64 array (vector)

BIG = 1 << 62
Interval = tuple[int, int]
_SAMPLE_PAGES = (0, 1, 2, 3, 5, 8, 13)
NEEDED_KEPT = 4096  # needed blocks kept for this many (pages, position) pairs
TABLED_UP_TO = 10  # objects: up to this many, the search's per-mask tables are made (2**objects entries)


def _runs(values: list[bool], lo_off: int) -> list[Interval]:
    out: list[Interval] = []
    start = None
    for i, v in enumerate(values):
        if v and start is None:
            start = i
        elif not v and start is not None:
            out.append((start + lo_off, i - 1 + lo_off))
            start = None
    if start is not None:
        out.append((start + lo_off, len(values) - 1 + lo_off))
    return out


def build_profile(needed: Callable[[Mapping[str, Any], Mapping[str, Any]], Any], page_size: int,
                  reach: int) -> tuple[Interval, ...] | None:
    """The intervals of offsets where ``needed`` holds, or None if it is not translation-covariant."""
    c = page_size
    rows = []
    for p in _SAMPLE_PAGES:
        rows.append([bool(needed({"p": p, "pos": p * c + d}, {})) for d in range(-reach, reach + 1)])
    if any(row != rows[0] for row in rows):
        return None
    row = rows[0]
    for p in _SAMPLE_PAGES:
        for d in (reach, reach + 1, reach + c, 2 * reach, 3 * reach + 7, 10 * reach):
            if bool(needed({"p": p, "pos": p * c + d}, {})) != row[-1]:
                return None
            if bool(needed({"p": p, "pos": p * c - d}, {})) != row[0]:
                return None
    out = []
    for lo, hi in _runs(row, -reach):
        out.append((-BIG if lo == -reach else lo, BIG if hi == reach else hi))
    return tuple(out)


class HitSearch:
    """Effective-hit search over per-page readiness masks (bit ``i`` = object ``objects[i]`` ready)."""

    def __init__(self, lookup: CompiledLookup, spec_lookup: Lookup, constants: Mapping[str, int],
                 page_size: int, tables: bool = True) -> None:
        """``tables``: search by per-mask tables when there are few objects (False: bit by bit)."""
        self.lookup = lookup
        self.objects = lookup.objects
        self.full = (1 << len(self.objects)) - 1
        self.page_size = page_size
        for obj in self.objects:
            if lookup.needed_reads_state[obj]:
                raise ConfigError(f"lookup needed[{obj}] must depend only on p, pos and constants")
        used: set[str] = set()
        for o in self.objects:
            used |= free_names(spec_lookup.needed[o])
        reach = 4 * sum(abs(constants[n]) for n in used if n in constants) + 4 * page_size + 16
        self.reach = reach
        profiles: dict[str, tuple[Interval, ...]] = {}
        for obj in self.objects:
            prof = build_profile(lookup.needed[obj], page_size, reach)
            if prof is not None:
                profiles[obj] = prof
        self.profiles: dict[str, tuple[Interval, ...]] | None = (
            profiles if len(profiles) == len(self.objects) else None)
        self.min_lo = min((lo for ivs in (self.profiles or {}).values() for lo, _ in ivs), default=0)
        items = [(k, lo, hi) for k, o in enumerate(self.objects) for lo, hi in (self.profiles or {}).get(o, ())]
        self._unbounded_below = any(lo <= -BIG for _, lo, _ in items)
        self._upward = [(k, lo) for k, lo, hi in items if hi >= BIG]
        self._upward_bits = sum({1 << k for k, _ in self._upward})
        self._bounded = [(k, lo, hi) for k, lo, hi in items if hi < BIG]
        self._max_hi = max((hi for _, _, hi in self._bounded), default=0)
        # by mask (few objects): the least ``lo`` of an upward interval not ready, and the bounded intervals
        # not ready (a short hit's search reads them instead of testing each object's bit on each page)
        self._up_lo: list[int] | None = None
        self._up_lo_array = np.zeros(0, dtype=np.int64)
        self._bounded_of: list[tuple[tuple[int, int], ...]] = []
        if tables and len(self.objects) <= TABLED_UP_TO:
            masks = range(1 << len(self.objects))
            self._up_lo = [min((lo for k, lo in self._upward if not (m >> k) & 1), default=BIG) for m in masks]
            self._up_lo_array = np.array(self._up_lo, dtype=np.int64)
            self._bounded_of = [tuple((lo, hi) for k, lo, hi in self._bounded if not (m >> k) & 1) for m in masks]
        self._least_up_lo = min((lo for _, lo in self._upward), default=BIG)
        self._needed: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}
        self._spans_kept: dict[tuple[int, int], tuple[tuple[int, tuple[tuple[int, int], ...]], ...]] = {}

    # -- needed -----------------------------------------------------------------------------------
    def needed(self, k: int, p: int, pos: int, direct: bool = False) -> bool:
        """Whether object ``objects[k]`` of block ``p`` is needed for a hit at ``pos`` (``direct``:
        evaluate the compiled predicate instead of the profile)."""
        if self.profiles is not None and not direct:
            d = pos - p * self.page_size
            return any(lo <= d <= hi for lo, hi in self.profiles[self.objects[k]])
        return bool(self.lookup.needed[self.objects[k]]({"p": p, "pos": pos}, {}))

    def blocking(self, masks: Masks, pos: int, direct: bool = False) -> list[tuple[int, int]]:
        """``(k, p)`` pairs needed for a hit at ``pos`` and not ready (pages past the chain never are)."""
        out = []
        for p in range(self._last_page(len(masks), pos) + 1):
            mask = masks[p] if p < len(masks) else 0
            if mask == self.full:
                continue
            for k in range(len(self.objects)):
                if not (mask >> k) & 1 and self.needed(k, p, pos, direct):
                    out.append((k, p))
        return out

    def needed_pages(self, k: int, npages: int, pos: int) -> list[int]:
        """Blocks ``p < npages`` whose object ``k`` is needed for a hit at ``pos``."""
        return list(self.needed_blocks(npages, pos)[k])

    def needed_blocks(self, npages: int, pos: int) -> tuple[tuple[int, ...], ...]:
        """``needed_pages(k, npages, pos)`` for every object ``k``, in object order (the last block
        that can be needed found once; kept by ``(npages, pos)``: most plans of a workload ask few)."""
        got = self._needed.get((npages, pos))
        if got is not None:
            return got
        top = min(npages, self._last_page(npages, pos) + 1)
        if self.profiles is None:
            got = tuple(tuple(p for p in range(top) if self.needed(k, p, pos)) for k in range(len(self.objects)))
        else:
            c, out = self.page_size, []
            for obj in self.objects:
                blocks: list[int] = []
                for lo, hi in reversed(self.profiles[obj]):  # disjoint, ascending in d: blocks disjoint, descending
                    a, b = max(0, -((hi - pos) // c)), min(top, (pos - lo) // c + 1)
                    if a < b:
                        blocks += range(a, b)
                out.append(tuple(blocks))
            got = tuple(out)
        if len(self._needed) >= NEEDED_KEPT:
            self._needed.clear()
        self._needed[(npages, pos)] = got
        return got

    def _spans(self, k: int, top: int, pos: int) -> list[tuple[int, int]]:
        """The blocks ``p < top`` whose object ``k`` is needed at ``pos``, read off the profile as
        half-open ranges ``[a, b)`` in block order: interval ``[lo, hi]`` of ``d = pos - p*C`` holds
        exactly for ``ceil((pos - hi) / C) <= p <= floor((pos - lo) / C)``."""
        assert self.profiles is not None
        c = self.page_size
        out = []
        for lo, hi in self.profiles[self.objects[k]]:
            a, b = max(0, -((hi - pos) // c)), min(top, (pos - lo) // c + 1)
            if a < b:
                out.append((a, b))
        out.sort()  # the intervals ascend in d, so their blocks descend
        return out

    def blocked(self, masks: Masks, pos: int) -> list[int]:
        """The objects ``k`` with a block needed for a hit at ``pos`` and not ready (pages past the
        chain never are): the ``k`` of ``blocking``'s pairs, ascending."""
        if self.profiles is None:
            return sorted({k for k, _ in self.blocking(masks, pos)})
        top = self._last_page(len(masks), pos) + 1
        ready = masks.tolist() if isinstance(masks, np.ndarray) else masks
        n = len(ready)
        spans = self._spans_kept.get((top, pos))
        if spans is None:  # every object's spans at (top, pos), kept: most lookups of a workload ask few
            if len(self._spans_kept) >= NEEDED_KEPT:
                self._spans_kept.clear()
            spans = self._spans_kept[(top, pos)] = tuple(
                (1 << k, tuple(self._spans(k, top, pos))) for k in range(len(self.objects)))
        out = []
        for k, (bit, ranges) in enumerate(spans):
            for a, b in ranges:
                if b > n or not reduce(and_, ready[a:b], bit) & bit:
                    out.append(k)
                    break
        return out

    def within(self, npages: int, pos: int) -> bool:
        """Whether every block that can be needed at ``pos`` is one of the chain's ``npages`` (then the
        objects ``blocked`` names are those with a needed block of the chain not ready)."""
        return self._last_page(npages, pos) < npages

    def _last_page(self, npages: int, pos: int) -> int:
        """The last block that can be needed at ``pos`` (blocks past the chain count as not ready)."""
        if self.profiles is None or self.min_lo <= -BIG:
            return max(npages - 1, pos // self.page_size + 1)
        return max(npages - 1, (pos - self.min_lo) // self.page_size)

    # -- search -----------------------------------------------------------------------------------
    def effective(self, masks: Masks, nominal: int) -> int:
        """The largest ``pos <= nominal`` with nothing needed and not ready (0 if none).

        Intervals unbounded above (``compressed``, ``tier``: needed at every later position) are
        settled by the first page not ready for them; the bounded ones (``tail``, ``window``) by a
        fixed point over the few pages whose intervals can reach the candidate position.
        """
        if self.profiles is None:
            return self.brute(masks, nominal)
        if self._unbounded_below:
            return self._effective_sorted(masks, nominal)
        if self._up_lo is not None:
            return self._effective_tabled(masks, nominal)
        c = self.page_size
        npages = len(masks)
        x = nominal
        pending = list(self._upward)
        if pending:
            bits = self._upward_bits
            if isinstance(masks, np.ndarray):  # only the pages not ready for an upward object, found at once
                failing: Iterable[int] = ((masks & bits) != bits).nonzero()[0].tolist()
            else:
                failing = [p for p, mask in enumerate(masks) if mask & bits != bits]
            for p in failing:  # (each not ready for some upward object)
                mask = int(masks[p])
                for item in pending[:]:
                    k, lo = item
                    if not (mask >> k) & 1:
                        x = min(x, p * c + lo - 1)
                        pending.remove(item)
                if not pending:
                    break
            for _, lo in pending:  # pages past the chain are never ready
                x = min(x, npages * c + lo - 1)
        full = self.full
        bounded = self._bounded
        changed = True
        while changed and x > 0:
            changed = False
            top = (x - self.min_lo) // c
            bottom = max(0, (x - self._max_hi) // c)
            for p in self._unready(masks, top, bottom):
                mask = int(masks[p]) if p < npages else 0
                if mask == full:
                    continue
                base = p * c
                for k, lo, hi in bounded:
                    if not (mask >> k) & 1 and base + lo <= x <= base + hi:
                        x = base + lo - 1
                        changed = True
        return max(x, 0)

    def _effective_tabled(self, masks: Masks, nominal: int) -> int:
        """``effective`` read off the per-mask tables.  An upward interval of a page not ready bounds
        the hit by ``p*C + lo - 1`` (a later page's by more: only the least counts, so every page's
        least ``lo`` is taken, with the pages past the chain's); the bounded ones then move the
        candidate below each interval that holds it, to the same fixed point (every position it skips
        is inside such an interval)::

            x = min(nominal, npages*C + least upward lo - 1, min over pages p of p*C + up_lo[mask p] - 1)
        """
        c = self.page_size
        up_lo, bounded_of = self._up_lo, self._bounded_of
        assert up_lo is not None
        npages = len(masks)
        least = self._least_up_lo - 1
        x = min(nominal, npages * c + least)
        listed = masks.__class__ is list
        if not listed and npages:  # an array (a long hit): the pages not ready for an upward object, at once
            bits, words = self._upward_bits, np.asarray(masks)
            failing = np.flatnonzero((words & bits) != bits)
            if len(failing):
                x = min(x, int(np.minimum.reduce(self._up_lo_array[words[failing]] + failing * c)) - 1)
        elif listed:
            base = 0
            for mask in masks:
                if base + least >= x:  # (no later page can bound it further)
                    break
                v = base + up_lo[mask] - 1
                if v < x:
                    x = v
                base += c
        min_lo, max_hi = self.min_lo, self._max_hi
        changed = True
        while changed and x > 0:
            changed = False
            top, bottom = (x - min_lo) // c, max(0, (x - max_hi) // c)
            for p in range(top, bottom - 1, -1) if listed else self._unready(masks, top, bottom):
                base = p * c
                for lo, hi in bounded_of[masks[p] if p < npages else 0]:
                    if base + lo <= x <= base + hi:
                        x = base + lo - 1
                        changed = True
        return max(x, 0)

    def _unready(self, masks: Masks, top: int, bottom: int) -> Iterable[int]:
        """Blocks ``top`` down to ``bottom`` whose mask may not be full (those past the chain: none is
        ready), every block when the masks are a list."""
        if not isinstance(masks, np.ndarray) or top < bottom:
            return range(top, bottom - 1, -1)
        n = len(masks)
        past = list(range(top, max(n, bottom) - 1, -1))
        inside = (masks[bottom:min(top, n - 1) + 1] != self.full).nonzero()[0] + bottom
        return past + inside[::-1].tolist()

    def _effective_sorted(self, masks: Masks, nominal: int) -> int:
        """The same answer from the sorted union of every forbidden interval."""
        assert self.profiles is not None
        c = self.page_size
        full = self.full
        last = self._last_page(len(masks), nominal)
        forbidden: list[Interval] = []
        nobj = len(self.objects)
        profiles = [self.profiles[o] for o in self.objects]
        if isinstance(masks, np.ndarray):  # only the pages not ready for every object, found at once
            pages: Iterable[int] = np.flatnonzero(masks[:last + 1] != full).tolist() + list(range(len(masks), last + 1))
        else:
            pages = range(last + 1)
        for p in pages:
            mask = int(masks[p]) if p < len(masks) else 0
            if mask == full:
                continue
            base = p * c
            for k in range(nobj):
                if not (mask >> k) & 1:
                    for lo, hi in profiles[k]:
                        a, b = base + lo, base + hi
                        if b >= 0 and a <= nominal:
                            forbidden.append((max(a, 0), min(b, nominal)))
        if not forbidden:
            return nominal
        forbidden.sort()
        merged: list[list[int]] = []
        for a, b in forbidden:
            if merged and a <= merged[-1][1] + 1:
                if b > merged[-1][1]:
                    merged[-1][1] = b
            else:
                merged.append([a, b])
        x = nominal
        for a, b in reversed(merged):
            if a <= x <= b:
                x = a - 1
            elif b < x:
                break
        return max(x, 0)

    def brute(self, masks: Masks, nominal: int) -> int:
        """The same answer by evaluating ``needed`` at every position (the oracle and the fallback)."""
        for pos in range(nominal, 0, -1):
            if not self.blocking(masks, pos, direct=True):
                return pos
        return 0
