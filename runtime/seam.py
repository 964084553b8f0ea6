"""The runtime side of the policy seam: every page's ``PageMeta`` kept current, every victim choice
asked of ``config.policy`` and checked before it is obeyed.

::

    decision  proposals checked by                                     then
    "gpu"     in the GPU pool, not protected or in flight, and the      offload it (or drop it)
              spec lets it offload or drop
    "host"    on the host tier, ..., the spec lets it spill or drop    spill it (or drop it)
    "disk"    on the disk tier, ..., the spec lets it drop             drop it
    "pool"    in the reuse pool, ..., the spec lets it evict           evict it

A refused proposal is counted (``policy_refusals``), reported to the policy (``on_refused``) and
skipped; an accepted one is counted by decision (``policy_victims``).  The policy can lose
performance; it can never make a step the spec forbids.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import attrgetter

import numpy as np

from .metabatch import MetaBatch
from .pages import PageDirectory, PageRecord
from .pipeline import Pipeline
from .policy import DECISIONS, EvictionPolicy, PageMeta


class PolicySeam:
    """PageMeta notifications and checked victim choice for one manager."""

    def __init__(self, policy: EvictionPolicy, pipe: Pipeline, pages: PageDirectory,
                 busy: Callable[[int], bool]) -> None:
        self.policy = policy
        self.pipe = pipe
        self.pages = pages
        self.busy = busy
        self.now = 0
        self.refusals = 0
        self.victims: Counter[str] = Counter()  # proposals accepted, by decision
        self.bulk_moves = type(policy).on_move_many is not EvictionPolicy.on_move_many
        # whether any of many pages is in use: ``busy``'s own test of a collection where it has one
        self.busy_any: Callable[[list[int]], bool] = getattr(busy, "any_of", None) or \
            (lambda pids: any(map(busy, pids)))

    # -- clock and notifications ------------------------------------------------------------------
    def tick(self) -> int:
        """Advance the logical clock (once per lookup, write or read the runtime serves)."""
        self.now += 1
        return self.now

    def inserted(self, rec: PageRecord) -> None:
        """A page now exists."""
        rec.created = rec.last_use = self.now
        self.policy.on_insert(rec)

    def writing(self, fresh: Sequence[PageRecord]) -> None:
        """A write committed, before its records take their tokens: ``inserted`` for each of ``fresh``
        (the pages it opened), ``holders`` of them +1, a tick; ``written`` follows.  For a policy that
        ``merges_writes``, nothing yet: ``written`` does it all and tells the policy once."""
        if not self.policy.merges_writes:
            for rec in fresh:
                self.inserted(rec)
            self.holders([rec.pid for rec in fresh], 1)
            self.tick()

    def written(self, fresh: Sequence[PageRecord], pids: list[int]) -> None:
        """The write's records took their tokens: ``accessed(pids)`` (every page it wrote, distinct, the
        fresh ones among them).  For a policy that ``merges_writes``, what ``writing`` left too: the
        fresh pages' metadata written as those notices do, then the policy told once (``on_written``)."""
        if not self.policy.merges_writes:
            self.accessed(pids)
            return
        now = self.now
        if not fresh:
            self.now = now + 1
            if pids:
                self.policy.on_written((), (), self._touch(pids), now + 1)
            return
        # (a fresh page's ``last_use``, ``now`` after ``inserted``, is not written: ``_touch`` below sets it
        # to the tick that follows, every fresh page being one of ``pids``, before the policy reads it)
        if len(fresh) <= FEW:  # a few: scalar updates (``_hold`` inlined), the records themselves as metadata
            holders = self.pages.cols.holders
            crossed = []
            count = holders.item  # (each count read as an int: no numpy scalar)
            for rec in fresh:
                pid = rec.pid
                rec.created = now
                held = count(pid) + 1
                holders[pid] = held
                if held == 1:
                    crossed.append(rec)
            metas: Sequence[PageMeta] = fresh
        else:  # more: ``holders`` written by one vector write
            listed = [rec.pid for rec in fresh]
            for rec in fresh:
                rec.created = now
            idx = np.fromiter(listed, dtype=np.int64, count=len(listed))
            metas, crossed = self._hold(idx, 1, listed)  # type: ignore[assignment]
        self.now = now + 1
        self.policy.on_written(metas, crossed, self._touch(pids), now + 1)

    def accessed(self, pids: Sequence[int] | np.ndarray, listed: list[int] | None = None) -> None:
        """Pages were hit by a lookup, read or written at the current tick (distinct ids; a list or an
        int64 array, ``listed`` the same as a list when the caller has one)."""
        if not len(pids):
            return
        self.policy.on_access_many(self._touch(pids, listed), self.now)

    def _touch(self, pids: Sequence[int] | np.ndarray, listed: list[int] | None = None) -> Sequence[PageMeta]:
        """``last_use`` of ``pids`` set to the current tick and their ``uses`` counted; their metadata."""
        now, cols = self.now, self.pages.cols
        few, idx = _few_or_array(pids)
        if few is not None:
            last_use, uses = cols.last_use, cols.uses
            count = uses.item  # (each count read as an int: no numpy scalar)
            for pid in few:
                last_use[pid] = now
                uses[pid] = count(pid) + 1
            return MetaBatch(few, self.pages.records.__getitem__)  # (``metas_of`` of a list of its own)
        cols.last_use[idx] = now
        cols.uses[idx] += 1
        return self.pages.metas_of(listed, idx)

    def updated(self, rec: PageRecord) -> None:
        """Something other than the tier changed in the page's metadata."""
        self.policy.on_update(rec)

    def updated_many(self, recs: Sequence[PageRecord]) -> None:
        """``updated`` for each of ``recs``, in order."""
        self.policy.on_update_many(list(recs))  # (a record is its own PageMeta)

    def sealed_many(self, recs: Sequence[PageRecord]) -> None:
        """Pages took their last token (their hash, tokens, types changed; nothing else), in order."""
        self.policy.on_sealed_many(list(recs))

    def holders(self, pids: Sequence[int] | np.ndarray, delta: int, listed: list[int] | None = None) -> None:
        """Pages joined (``delta`` 1) or left (-1) a live sequence's block table (distinct ids; a list
        or an int64 array, ``listed`` the same as a list when the caller has one)."""
        if not len(pids):
            return
        self.policy.on_holders_many(*self._hold(pids, delta, listed))

    def _hold(self, pids: Sequence[int] | np.ndarray, delta: int,
              listed: list[int] | None = None) -> tuple[Sequence[PageMeta], Sequence[PageMeta]]:
        """``holders`` of ``pids`` moved by ``delta``; their metadata, and that of the pages that crossed
        (held now for +1, no longer held for -1)."""
        holders = self.pages.cols.holders
        edge = 1 if delta > 0 else 0  # the count a page that crossed has now
        few, idx = _few_or_array(pids)
        if few is not None:  # scalar updates (each count read as an int: no numpy scalar)
            count, crossed = holders.item, []
            for pid in few:
                held = count(pid) + delta
                holders[pid] = held
                if held == edge:
                    crossed.append(pid)
            lookup = self.pages.records.__getitem__  # (``metas_of`` of two lists of its own)
            return MetaBatch(few, lookup), MetaBatch(crossed, lookup)
        assert idx is not None
        metas = self.pages.metas_of(listed, idx)
        counts = holders[idx]  # (distinct ids: the counts read once, moved, written back)
        counts += delta
        holders[idx] = counts
        hit = counts == edge
        return metas, metas if hit.all() else self.pages.metas_of(None, idx[hit])

    def moved(self, rec: PageRecord, tier: str) -> None:
        """The page's payload moved to ``tier`` (``"dropped"``: it is gone)."""
        old, rec.tier = rec.tier, tier
        if old != tier:
            self.policy.on_move(rec, old)

    def moved_many(self, recs: Sequence[PageRecord], tiers: Sequence[str], olds: list[str] | None = None) -> None:
        """``moved`` for each of ``recs`` (distinct pages) to its tier in ``tiers``, in order; the policy
        told in bulk where it takes moves in bulk.  ``olds``: each page's tier now, none of them its
        tier in ``tiers`` (the caller checked: nothing to leave out, the tiers not read again)."""
        if not self.bulk_moves:
            for rec, tier in zip(recs, tiers, strict=True):
                self.moved(rec, tier)
            return
        if olds is not None and len(recs) > 8:
            metas = recs if isinstance(recs, list) else list(recs)
            deque(map(setattr, metas, repeat("tier"), tiers), 0)  # each page's ``tier`` written
            self.policy.on_move_many(metas, olds)
            return
        if len(recs) <= 8:  # a few: one pass
            metas, olds = [], []
            for rec, tier in zip(recs, tiers, strict=True):  # (a record is its own PageMeta)
                if rec.tier != tier:
                    olds.append(rec.tier)
                    rec.tier = tier
                    metas.append(rec)
            if metas:
                self.policy.on_move_many(metas, olds)
            return
        metas = list(recs)
        olds = list(map(_TIER, metas))
        if any(map(str.__eq__, olds, tiers)):  # a page already there: left out
            kept = [i for i, (old, tier) in enumerate(zip(olds, tiers, strict=True)) if old != tier]
            metas, olds, tiers = [metas[i] for i in kept], [olds[i] for i in kept], [tiers[i] for i in kept]
        deque(map(setattr, metas, repeat("tier"), tiers), 0)  # each page's ``tier`` written
        if metas:
            self.policy.on_move_many(metas, olds)

    def removed(self, rec: PageRecord) -> None:
        """The page is forgotten."""
        self.policy.on_remove(rec)

    def removed_many(self, recs: Sequence[PageRecord]) -> None:
        """Pages are forgotten (``removed`` for each, in order)."""
        self.policy.on_remove_many(list(recs))

    # -- decisions --------------------------------------------------------------------------------
    def choose_many(self, decision: str, events: tuple[str, ...], protect: frozenset[int] | set[int],
                    k: int, guarded: bool = True, recs: list[PageRecord] | None = None) -> list[int] | None:
        """The ``k`` first proposals for ``decision`` when ``choose`` would accept each of them in turn
        and the policy's proposals have no side effect (``pure_proposals``); None otherwise (then
        nothing was counted or reported: the caller chooses one at a time).  The caller counts them
        with ``accepted`` once it moved them.  ``guarded`` off: the spec's guard of ``events`` is left
        to the caller (it fires them as one batch that the guard refuses as a whole where ``choose``
        would refuse one, and then chooses one at a time).  ``recs``: a list the proposals' records are
        put in, in order, when they are returned (empty when None is)."""
        if not self.policy.pure_proposals or decision not in DECISIONS:
            return None
        out = self.policy.propose_first(decision, k)
        if len(out) < k or not protect.isdisjoint(out) or self.busy_any(out):
            return None  # ``choose`` would refuse one of them: counted and reported there
        found = list(map(self.pages.records.get, out))
        if None in found:
            return None
        if decision == "pool":
            if not all(map(_POOLED, found)):
                return None
        elif list(map(_TIER, found)).count(decision) != k:
            return None
        if guarded:
            allowed, first, rest = self.pipe.allowed, events[0], events[1:]
            if not rest:  # one event: each page asked in one pass
                if not all(map(self.pipe.allower(first), repeat(None, k), out)):
                    return None
            else:
                for pid in out:
                    if not (allowed(first, None, pid) or any(allowed(ev, None, pid) for ev in rest)):
                        return None
        if recs is not None:
            recs.extend(found)  # type: ignore[arg-type]
        return out

    def accepted(self, decision: str, k: int) -> None:
        """``k`` proposals of ``choose_many`` were obeyed."""
        if k:
            self.victims[decision] += k

    def choose(self, decision: str, events: tuple[str, ...], protect: frozenset[int] | set[int]) -> int | None:
        """The first proposal for ``decision`` that is in that tier, not protected, not in flight, and
        that the spec lets leave by one of ``events``; None when the policy has no acceptable page."""
        tier = decision if decision in ("host", "disk") else ("gpu" if decision == "gpu" else None)
        find, allowed, first, rest = self.pages.find, self.pipe.allowed, events[0], events[1:]
        for pid in self.policy.propose(decision):
            rec = find(pid)
            if rec is None:
                reason = "unknown page"
            elif (tier is not None and rec.tier != tier) or (decision == "pool" and not rec.pooled):
                reason = "not in pool" if decision == "pool" else "not in tier"
            elif pid in protect:
                reason = "protected"  # the operation that needs the room uses it
            elif self.busy(pid):
                reason = "in flight"
            elif not (allowed(first, None, pid) or any(allowed(ev, None, pid) for ev in rest)):
                reason = f"spec refuses {' and '.join(events)}"
            else:
                self.victims[decision] += 1
                return pid
            self.refusals += 1
            self.policy.on_refused(decision, pid, reason)
        return None


_TIER, _POOLED = attrgetter("tier"), attrgetter("pooled")
FEW = 8  # pages up to this many are counted by scalar updates, more by vector writes (32: no clear gain)


def _few_or_array(pids: Sequence[int] | np.ndarray) -> tuple[list[int] | None, np.ndarray | None]:
    """A few page ids (up to ``FEW``) as a list (scalar updates cost less than numpy's fixed cost), more as an int64
    array: ``(list, None)`` or ``(None, array)``."""
    if len(pids) <= FEW:
        return (pids.tolist() if isinstance(pids, np.ndarray) else list(pids)), None
    return None, pids if isinstance(pids, np.ndarray) else np.fromiter(pids, dtype=np.int64, count=len(pids))
