"""Lookup, recovery plans, leases and reads.

::

    lookup(tokens)
      1. nominal   hash-chain walk (+ partial page match)                 index.py
      2. masks     per page, the spec's ready[k] predicates (cached)       ManagerBase._mask
      3. effective largest pos <= nominal with nothing needed unready     search.py
      4. answer    Miss | Ready(lease: acquire on every whole page) | NeedsRecovery(plan)
"""

from __future__ import annotations

import operator
from array import array
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

from . import binding as B
from .errors import (
    BadInputError,
    ForeignLeaseError,
    GuardRefused,
    LeaseReleasedError,
    MorphcacheError,
    StaleLeaseError,
)
from .index import NominalHit, token_array
from .lease import Lease, PartialSnapshot
from .plan import (
    Assignment,
    LookupResult,
    Miss,
    NeedsRecovery,
    Probe,
    Ready,
    RecoveryPlan,
    RecoveryReport,
    choose_path,
)
from .tiering import TieringOps
from .views import View, sequence_view

MAX_TOKEN = (1 << 64) - 1


@dataclass(frozen=True)
class ReadView:
    """What a validated read sees: GPU slots and generations of the leased pages (block order), and
    their payloads when asked for."""

    lease_id: int
    slots: tuple[int, ...]
    generations: tuple[int, ...]
    payloads: tuple[bytes, ...] | None


def check_tokens(tokens: object, what: str = "tokens") -> Sequence[int]:
    """``tokens`` as unsigned 64-bit ints (checked by the array conversion, in C); BadInputError for
    anything that is not a sequence of integers in [0, 2**64).  (``bool`` is an int in Python and is
    accepted as 0/1; numpy integers are accepted.)"""
    if tokens.__class__ is list and len(tokens) <= 4:  # type: ignore[arg-type]
        small: list[Any] = tokens  # type: ignore[assignment]
        if all(t.__class__ is int and 0 <= t <= MAX_TOKEN for t in small):
            return small  # type: ignore[return-value]
    if isinstance(tokens, (str, bytes, bytearray)) or not isinstance(tokens, (Sequence, array)) and not hasattr(
            tokens, "__array__"):
        raise BadInputError(f"{what} must be a sequence of ints, got {type(tokens).__name__}")
    try:
        return token_array(tokens)  # type: ignore[arg-type]
    except (TypeError, OverflowError, ValueError):
        pass
    try:
        seq = list(tokens)  # type: ignore[call-overload]
    except TypeError:  # a 0-d array or a numpy scalar: array-like, but not a sequence
        raise BadInputError(f"{what} must be a sequence of ints, got {type(tokens).__name__} "
                            f"{_shown(tokens)}") from None
    for i, t in enumerate(seq):
        try:
            value = operator.index(t)
        except TypeError:
            raise BadInputError(f"{what}[{i}] must be an int, got {type(t).__name__} {_shown(t)}") from None
        if not 0 <= value <= MAX_TOKEN:
            raise BadInputError(f"{what}[{i}] must be in [0, 2**64), got {value}") from None
    raise BadInputError(f"{what} cannot be read as 64-bit token ids")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class LookupOps(TieringOps):
    """Lookup, plans, recovery, leases and reads."""

    # -- lookup -------------------------------------------------------------------------------------
    def _lookup_view(self, hit: NominalHit) -> View:
        return sequence_view("lookup view", self.cspec, self.cols, list(hit.pages), {B.FRONTIER: hit.tokens})

    def _masks(self, hit: NominalHit) -> list[int]:
        cached = self.pages.masks
        masks = [m if (m := cached[pid]) is not None else self._mask(pid) for pid in hit.pages]
        if self._nonlocal_ready:
            view = self._lookup_view(hit)
            for p in range(len(masks)):
                view.names["p"] = p
                for i, fn in self._nonlocal_ready:
                    if fn(view.names, view.arrays):
                        masks[p] |= 1 << i
        return masks

    def _probe(self, tokens: Sequence[int], limit: int | None) -> Probe:
        hit = self.index.nominal(tokens, limit)
        masks = self._masks(hit)
        eff = self.search.effective(masks, hit.tokens)
        blocking = (frozenset(self._objects[k] for k, _ in self.search.blocking(masks, hit.tokens))
                    if eff < hit.tokens else frozenset())
        return Probe(hit.tokens, eff, blocking)

    def _lookup(self, tokens: Sequence[int], limit: int | None, owner: str | None) -> LookupResult:
        hit = self.index.nominal(tokens, limit)
        masks = self._masks(hit)
        nominal = hit.tokens
        eff = self.search.effective(masks, nominal)
        blocking = ({self._objects[k] for k, _ in self.search.blocking(masks, nominal)}
                    if eff < nominal else set())
        self.stats.lookup(len(tokens), nominal, eff, blocking)
        for pid in hit.pages:
            self._touch(pid)
        if nominal == 0:
            self.stats.misses += 1
            return Miss()
        if eff < nominal:
            plan = self._plan(hit, masks, eff, nominal)
            gain = nominal - eff
            if plan.pages_to_prefetch or plan.pages_to_compress or plan.recompute_tokens < gain:
                self.stats.needs_recovery += 1
                for a in plan.assignments:
                    self.stats.planned_by_path[a.path] += 1
                return NeedsRecovery(plan)
        if eff == 0:
            self.stats.misses += 1
            return Miss(nominal, 0)
        self.stats.ready += 1
        return Ready(self._lease_prefix(hit.pages, eff, owner), nominal)

    def _plan(self, hit: NominalHit, masks: list[int], eff: int, target: int) -> RecoveryPlan:
        pages = hit.pages
        lk = self.cspec.lookup
        gnames: dict[str, Any] = dict(self.constants)
        view = None
        assignments: list[Assignment] = []
        in_place = 0
        missing: Counter[str] = Counter()
        for k, obj in enumerate(self._objects):
            for p in self.search.needed_pages(k, len(pages), target):
                pid = pages[p]
                if (masks[p] >> k) & 1:
                    in_place += 1
                    continue
                if lk.recovery_local[obj]:
                    gnames["p"] = pid
                    path = choose_path(obj, pid, p, lk.recovery[obj], gnames, self.cols)
                else:
                    view = view or self._lookup_view(hit)
                    view.names["p"] = p
                    path = choose_path(obj, pid, p, lk.recovery[obj], view.names, view.arrays)
                missing[obj] += 1
                assignments.append(Assignment(pid, p, obj, path))
        assignments.sort(key=lambda a: (a.block, a.obj))
        recompute = {a.block for a in assignments if a.path == "recompute"}
        rtokens = sum(min((p + 1) * self.C, target) - p * self.C for p in recompute)
        prefetch = {a.page for a in assignments if a.path == "prefetch"}
        compress = {a.page for a in assignments if a.path == "compress"}
        return RecoveryPlan(hit.tokens, eff, target, pages, tuple(assignments), in_place, rtokens,
                            len(prefetch) * self.page_bytes, len(prefetch), len(compress), dict(missing))

    # -- leases -------------------------------------------------------------------------------------
    def _lease_prefix(self, pages: Sequence[int], pos: int, owner: str | None) -> Lease:
        nfull = pos // self.C
        full = tuple(pages[:nfull])
        partial = None
        if pos % self.C:
            src = pages[nfull]
            info = self.pages.info[src]
            n = pos % self.C
            partial = PartialSnapshot(nfull, src, tuple(info.tokens[:n]),
                                      self.store.read_prefix(info.gpu_slot, n))
        return self._acquire(full, pos, owner, partial)

    def _acquire(self, full: tuple[int, ...], pos: int, owner: str | None,
                 partial: PartialSnapshot | None = None, tail: int | None = None) -> Lease:
        done = self.core.fast.fire_batch("acquire", full)
        if done < len(full):
            self._unpin(full[:done])
            self._fire("acquire", full[done])  # raises the spec's refusal
        gen = self.cols[B.GEN]
        gens = tuple(map(gen.__getitem__, full))
        lease = Lease(self.ident, owner, full, gens, pos, partial, tail)  # type: ignore[arg-type]
        self.leases[lease.lease_id] = lease
        return lease

    def _unpin(self, pids: Sequence[int]) -> None:
        pin = self.cols[B.PIN]
        names = ["release_last" if pin[pid] == 1 else "release" for pid in pids]
        done = self.core.fast.fire_batch(names, pids)
        if done < len(pids):
            self._fire(names[done], pids[done])  # raises the spec's refusal

    def _own(self, lease: object) -> Lease:
        if not isinstance(lease, Lease):
            raise BadInputError(f"expected a Lease, got {type(lease).__name__}")
        if lease.issuer != self.ident or self.leases.get(lease.lease_id) is not lease:
            if lease.issuer == self.ident and lease.released:
                raise LeaseReleasedError(f"lease #{lease.lease_id} was already released")
            raise ForeignLeaseError(f"lease #{lease.lease_id} was not issued by this manager")
        if lease.released:
            raise LeaseReleasedError(f"lease #{lease.lease_id} was already released")
        return lease

    def _release(self, lease: Lease) -> None:
        lease.released = True
        del self.leases[lease.lease_id]
        self._unpin(lease.pages)
        info = self.pages.info
        for pid in lease.pages:
            if not info[pid].seqs:
                self._collect(pid)

    def _validate(self, lease: Lease, payloads: bool) -> ReadView:
        slots = []
        for i, pid in enumerate(lease.pages):
            try:
                self._fire("read", pid)
            except GuardRefused as exc:
                raise StaleLeaseError(
                    f"lease #{lease.lease_id}: page {pid} failed re-validation: {exc}") from exc
            if self.cols[B.GEN][pid] != lease.generations[i]:
                raise StaleLeaseError(f"lease #{lease.lease_id}: page {pid} generation "
                                      f"{self.cols[B.GEN][pid]} != leased {lease.generations[i]}")
            slots.append(self.pages.info[pid].gpu_slot)
        data = tuple(self.store.read(s) for s in slots) if payloads else None
        return ReadView(lease.lease_id, tuple(slots), lease.generations, data)

    # -- recovery -----------------------------------------------------------------------------------
    def _recover(self, plan: RecoveryPlan, block: bool) -> RecoveryReport:
        protect = frozenset(plan.pages)
        with self.lock:
            self.held.update(protect)
        try:
            return self._recover_held(plan, block, protect, [])
        finally:
            with self.lock:
                self.held.subtract(protect)
                for pid in plan.pages:
                    if self.held[pid] <= 0:
                        del self.held[pid]
                    self._collect(pid)

    def _recover_held(self, plan: RecoveryPlan, block: bool, protect: frozenset[int],
                      futures: list[Future[None]]) -> RecoveryReport:
        done: Counter[str] = Counter()
        failed: list[tuple[int, str]] = []
        with self.lock:
            for pid in plan.pages_on("prefetch"):
                if pid not in self.pages.info:
                    failed.append((pid, "page is gone"))
                    continue
                try:
                    futures.append(self._prefetch(pid, protect))
                except MorphcacheError as exc:
                    failed.append((pid, str(exc)))
        if block and futures:
            wait(futures)
        with self.lock:
            for pid in plan.pages_on("recompute"):
                if pid not in self.pages.info:
                    failed.append((pid, "page is gone"))
                    continue
                try:
                    if self.cols[B.TIER][pid] != "dropped":
                        self._drop(pid)
                    self._recompute(pid, protect)
                except MorphcacheError as exc:
                    failed.append((pid, str(exc)))
            for pid in plan.pages:
                if pid in self.pages.info and self.cols[B.TIER][pid] == "gpu":
                    self._maintain(pid)
            for a in plan.assignments:
                done[a.path] += 1
                self.stats.recoveries_by_path[a.path] += 1
        return RecoveryReport(dict(done), tuple(failed), len(futures))

    def _maintain(self, pid: int) -> None:
        """Propose compression, indexing and admission for a sealed page (the spec decides)."""
        if self.cols[B.TAIL][pid] == "sealed" and self.cols[B.COMPRESSED][pid] == "none":
            if self._try("begin_compress", pid):
                self.store.compress(self.pages.info[pid].gpu_slot)
        if self.cols[B.COMPRESSED][pid] == "building":
            self._try("finish_compress", pid)
        if self.cols[B.COMPRESSED][pid] == "complete" and (
                self.cols[B.INDEXER][pid] != "built" or self._mask_stale_index(pid)):
            self._try("build_index", pid)
        if self.config.auto_admit and self.cols[B.POOL][pid] != "pooled":
            self._admit(pid)
        if self.config.release_tails:
            self._try("release_tail", pid)

    def _morphology_ready(self, pid: int) -> bool:
        """The page's compressed, indexer and tier objects are ready (the spec's ready predicates)."""
        mask = self._mask(pid)
        return all((mask >> self._objects.index(o)) & 1
                   for o in (B.COMPRESSED, B.INDEXER, B.TIER) if o in self._objects)

    def _mask_stale_index(self, pid: int) -> bool:
        k = self._objects.index(B.INDEXER) if B.INDEXER in self._objects else None
        return k is not None and not (self._mask(pid) >> k) & 1

    def _admit(self, pid: int) -> bool:
        """Propose admission to the reuse pool, evicting the least recently used unpinned pooled page
        when the pool is full."""
        if self._try("admit", pid, likely=len(self.pooled) < self.config.capacity):
            return True
        if len(self.pooled) < self.config.capacity or not self._morphology_ready(pid):
            return False
        victim = next((p for p in self.pooled if p != pid and self.core.allowed("evict", p)), None)
        if victim is None:
            return False
        self._fire("evict", victim)
        self._collect(victim, keep=frozenset({pid}))
        return self._try("admit", pid)
