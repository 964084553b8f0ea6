"""STAND-IN, benchmark only: a CacheManager that asks an eviction policy for its victims.

The runtime does not take ``RuntimeConfig(policy=...)`` yet (a rewrite that will is under way).
Until it does, ``bench_eviction.py`` replays through this subclass, which adds the contract the
rewrite will implement natively and nothing else:

* ``register(seq_id, tokens=(), *, types=None, session=None, task=None)`` and
  ``append(seq_id, tokens, *, types=None)`` take token-type spans over the given tokens;
* one ``PageMeta`` per page, kept in step with the spec state after every fired event (tier, pool
  membership, holders, hash, types), and the notifications ``on_insert`` / ``on_access`` /
  ``on_update`` / ``on_move`` / ``on_remove``;
* every victim choice (GPU slot reclaim, host and disk room, reuse-pool admission) takes the
  policy's proposals in order; a proposal that names no page of the tier, a protected or in-flight
  page, or one the spec refuses to move is refused, counted (``refusals``) and reported back with
  ``on_refused``, never obeyed.

It overrides private methods of the current runtime and goes away once ``RuntimeConfig`` takes a
policy (the benchmark then uses the runtime directly).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from morphcache.runtime import CacheManager, CapacityError, GuardRefused, RuntimeConfig
from morphcache.runtime import binding as B
from morphcache.runtime.core import Sequence as RtSequence
from morphcache.runtime.lease import Lease
from morphcache.runtime.policy import EvictionPolicy, PageMeta, make_policy

Span = tuple[int, int, str]


class PolicyCacheManager(CacheManager):
    """CacheManager whose victims come from ``policy`` (see the module docstring)."""

    def __init__(self, config: RuntimeConfig, policy: EvictionPolicy | str) -> None:
        self.policy = make_policy(policy)
        self.metas: dict[int, PageMeta] = {}
        self.spans: dict[str, list[Span]] = {}
        self.labels: dict[str, tuple[str | None, str | None]] = {}
        self.refusals: Counter[str] = Counter()
        super().__init__(config=config)
        release = self.pages.release

        def release_and_notify(pid: int) -> None:
            meta = self.metas.pop(pid, None)
            if meta is not None:
                self.policy.on_remove(meta)
            release(pid)

        self.pages.release = release_and_notify  # type: ignore[method-assign]

    # -- the typed API --------------------------------------------------------------------------------
    def register(self, seq_id: str, tokens: Sequence[int] = (), *, types: Sequence[Span] | None = None,
                 session: str | None = None, task: str | None = None) -> int:
        self.spans[seq_id] = []
        self.labels[seq_id] = (session, task)
        frontier = super().register(seq_id)
        if tokens:
            frontier = self.append(seq_id, tokens, types=types)
        return frontier

    def append(self, seq_id: str, tokens: Sequence[int], *, types: Sequence[Span] | None = None) -> int:
        start = self.frontier(seq_id)
        if types:
            self.spans.setdefault(seq_id, []).extend((s + start, e + start, n) for s, e, n in types)
        frontier = super().append(seq_id, tokens)
        seq = self._seq(seq_id)
        for block in range(start // self.C, (frontier - 1) // self.C + 1 if frontier else 0):
            self._retype(seq, block)
        return frontier

    def attach(self, seq_id: str, lease: Lease) -> int:
        frontier = super().attach(seq_id, lease)
        part = lease.partial
        seq = self._seq(seq_id)
        if part is not None and part.tokens and part.source in self.metas and seq.block:
            meta = self.metas.get(seq.block[-1])
            if meta is not None:
                meta.types = self.metas[part.source].types
                self.policy.on_update(meta)
        return frontier

    def free(self, seq_id: str) -> None:
        super().free(seq_id)
        self.spans.pop(seq_id, None)
        self.labels.pop(seq_id, None)

    # -- metadata in step with the spec ---------------------------------------------------------------
    def _retype(self, seq: RtSequence, block: int) -> None:
        pid = seq.block[block]
        meta = self.metas.get(pid)
        if meta is None:
            return
        lo, hi = block * self.C, (block + 1) * self.C
        types = frozenset(n for s, e, n in self.spans.get(seq.sid, ()) if s < hi and e > lo)
        tokens = len(self.pages.info[pid].tokens)
        if types - meta.types or tokens != meta.tokens:
            meta.types = meta.types | types
            meta.tokens = tokens
            self.policy.on_update(meta)

    def _fire(self, name: str, pid: int | None = None, seq: RtSequence | None = None) -> None:
        super()._fire(name, pid, seq)
        if pid is None:
            return
        meta = self.metas.get(pid)
        if meta is None:
            if name == "open" and seq is not None:
                self._created(pid, seq)
            return
        self._sync(pid, meta)

    def _created(self, pid: int, seq: RtSequence) -> None:
        info = self.pages.info[pid]
        session, task = self.labels.get(seq.sid, (None, None))
        lo, hi = info.depth * self.C, (info.depth + 1) * self.C
        types = frozenset(n for s, e, n in self.spans.get(seq.sid, ()) if s < hi and e > lo)
        meta = PageMeta(pid, info.depth, tokens=len(info.tokens), types=types, session=session, task=task,
                        writer=seq.sid, created=self.clock, tier="gpu", bytes=self.page_bytes,
                        recovery_tokens=self.C)
        meta.holders = len(info.seqs)
        self.metas[pid] = meta
        self.policy.on_insert(meta)

    def _sync(self, pid: int, meta: PageMeta) -> None:
        """Notify the policy of whatever the last event changed in the page's metadata."""
        info = self.pages.info.get(pid)
        if info is None:
            return
        tier = str(self.cols[B.TIER][pid])
        pooled = self.cols[B.POOL][pid] == "pooled"
        if tier != meta.tier:
            old, meta.tier = meta.tier, tier
            meta.pooled, meta.hash, meta.holders = pooled, info.hash, len(info.seqs)
            self.policy.on_move(meta, old)
        elif pooled != meta.pooled or info.hash != meta.hash or len(info.seqs) != meta.holders:
            meta.pooled, meta.hash, meta.holders = pooled, info.hash, len(info.seqs)
            self.policy.on_update(meta)

    def _touch(self, pid: int) -> None:
        super()._touch(pid)
        meta = self.metas.get(pid)
        if meta is not None:
            meta.last_use = self.clock
            meta.uses += 1
            meta.tokens = len(self.pages.info[pid].tokens)
            meta.hash = self.pages.info[pid].hash
            self.policy.on_access(meta, self.clock)

    def _refs_changed(self, pid: int) -> None:
        super()._refs_changed(pid)
        meta = self.metas.get(pid)
        if meta is not None:
            self._sync(pid, meta)

    # -- victims from the policy ----------------------------------------------------------------------
    def _choose(self, decision: str, ok: Callable[[int], str | None]) -> int | None:
        """The first proposal for ``decision`` that ``ok`` finds no reason to refuse."""
        proposals = self.policy.propose(decision)
        try:
            for pid in proposals:
                reason = ok(pid)
                if reason is None:
                    return pid
                self.refusals[f"{decision}: {reason}"] += 1
                self.policy.on_refused(decision, pid, reason)
        finally:
            proposals.close()  # type: ignore[attr-defined]
        return None

    def _tier_reason(self, pid: int, tier: str, protect: frozenset[int] | set[int]) -> str | None:
        if pid not in self.pages.info:
            return "unknown page"
        if self.cols[B.TIER][pid] != tier:
            return "not in tier"
        if pid in protect:
            return "protected"
        if pid in self.inflight:
            return "in flight"
        return None

    def _reclaim_gpu(self, protect: frozenset[int] | set[int]) -> bool:
        host = self.config.host_pages > 0
        tried: set[int] = set()

        def ok(pid: int) -> str | None:
            if pid in tried:
                return "already tried"
            reason = self._tier_reason(pid, "gpu", protect)
            if reason is None and not (self.core.allowed("offload", pid) or self.core.allowed("drop", pid)):
                reason = "spec refuses offload and drop"
            return reason

        while True:
            victim = self._choose("gpu", ok)
            if victim is None:
                return False
            tried.add(victim)
            if host and self.core.allowed("offload", victim):
                try:
                    self._offload(victim, "host", protect)
                    return True
                except (GuardRefused, CapacityError):
                    pass
            if self.core.allowed("drop", victim):
                self._drop(victim)
                self._collect(victim)
                return True
            self.refusals["gpu: host full and drop refused"] += 1
            self.policy.on_refused("gpu", victim, "host full and drop refused")

    def _room_host(self, protect: frozenset[int] | set[int]) -> None:
        while self.host.full:
            victim = self._choose("host", lambda p: self._tier_reason(p, "host", protect))
            if victim is None:
                raise CapacityError(f"host tier full ({self.host.capacity} pages), nothing can leave it")
            if self.disk is not None:
                self._spill(victim, protect)
            else:
                self._drop(victim)
                self._collect(victim)

    def _room_disk(self, protect: frozenset[int] | set[int]) -> None:
        assert self.disk is not None
        while self.disk.full:
            victim = self._choose("disk", lambda p: self._tier_reason(p, "disk", protect))
            if victim is None:
                raise CapacityError(f"disk tier full ({self.disk.capacity} pages), nothing can leave it")
            self._drop(victim)
            self._collect(victim)

    def _admit(self, pid: int) -> bool:
        if self._try("admit", pid, likely=len(self.pooled) < self.config.capacity):
            return True
        if len(self.pooled) < self.config.capacity or not self._morphology_ready(pid):
            return False

        def ok(p: int) -> str | None:
            if p == pid or p not in self.pooled:
                return "not in pool"
            return None if self.core.allowed("evict", p) else "spec refuses evict"

        victim = self._choose("pool", ok)
        if victim is None:
            return False
        self._fire("evict", victim)
        self._collect(victim, keep=frozenset({pid}))
        return self._try("admit", pid)
