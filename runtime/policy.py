"""Victim choice behind one interface: the policy proposes, the spec disposes.

Whenever a tier is full the runtime asks the manager's policy which page should leave it::

    decision   page leaves        by the spec event(s)            when
    "gpu"      the GPU            offload (to host) or drop       a GPU slot is needed
    "host"     the host tier      spill (to disk) or drop         the host tier is full
    "disk"     the disk tier      drop                            the disk tier is full
    "pool"     the reuse pool     evict                           admission finds the pool full

A policy keeps its own ordering, incrementally, from the notifications below (nothing is
rescanned per decision), and answers ``propose(decision)`` with page ids, best victim first,
lazily.  The runtime takes them one by one: a proposal the spec's guard refuses (pinned, being
written, in flight, captured) or that names no page of that tier is *refused and counted*
(``policy_refusals`` in the metrics), never obeyed, and the next proposal is tried.  A policy can
lose performance; it can never make an illegal read happen.

Page metadata (``PageMeta``) is owned and updated by the runtime; policies read it and must not
write it.  The clock is logical: it ticks once per lookup, write or read the runtime serves.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from itertools import islice

DECISIONS = ("gpu", "host", "disk", "pool")


class PageMeta:
    """What a policy may know about one page.

    ``types``: the token types the page contains (``"system"``, ``"user"``, ``"tool"``,
    ``"response"``, ``"reasoning"`` or any tag the engine used; empty when untyped);
    ``session`` / ``task``: the ids of the request that wrote it; ``holders``: live sequences
    whose block table holds it; ``recovery_tokens``: tokens a recompute of it would prefill;
    ``bytes``: what it occupies on its tier; ``hash``: its chain hash once sealed (None while
    filling), stable across evictions, so a policy can recognise a page that comes back.
    """

    __slots__ = ("page", "depth", "tokens", "types", "session", "task", "created", "last_use", "uses",
                 "tier", "bytes", "recovery_tokens", "pooled", "holders", "hash")

    def __init__(self, page: int, depth: int, *, tokens: int = 0, types: frozenset[str] = frozenset(),
                 session: str | None = None, task: str | None = None, created: int = 0, tier: str = "gpu",
                 bytes: int = 0, recovery_tokens: int = 0) -> None:
        self.page = page
        self.depth = depth
        self.tokens = tokens
        self.types = types
        self.session = session
        self.task = task
        self.created = created
        self.last_use = created
        self.uses = 0
        self.tier = tier
        self.bytes = bytes
        self.recovery_tokens = recovery_tokens
        self.pooled = False
        self.holders = 0
        self.hash: int | None = None

    def __repr__(self) -> str:
        return (f"PageMeta(page={self.page}, depth={self.depth}, tier={self.tier!r}, uses={self.uses}, "
                f"last_use={self.last_use}, holders={self.holders}, pooled={self.pooled})")


class EvictionPolicy:
    """The interface every victim-choice policy implements (see the module docstring)."""

    name = "policy"

    def on_insert(self, meta: PageMeta) -> None:
        """A page now exists (opened on the GPU, or its metadata was registered)."""

    def on_access(self, meta: PageMeta, now: int) -> None:
        """The page was hit by a lookup, read, or written (``meta.last_use``/``uses`` already updated)."""

    def on_update(self, meta: PageMeta) -> None:
        """Something else in ``meta`` changed: holders, pooled, hash, types, tokens."""

    def on_move(self, meta: PageMeta, old_tier: str) -> None:
        """The page moved from ``old_tier`` to ``meta.tier`` (``"dropped"`` when its payload is gone)."""

    def on_remove(self, meta: PageMeta) -> None:
        """The page is forgotten (its id may be reused): drop every reference to it."""

    def on_access_many(self, metas: Sequence[PageMeta], now: int) -> None:
        """``on_access`` for each page of a lookup's hit or a lease's read (override to do it in bulk)."""
        for meta in metas:
            self.on_access(meta, now)

    def on_update_many(self, metas: Sequence[PageMeta]) -> None:
        """``on_update`` for each of many pages (a prefix attached or freed at once)."""
        for meta in metas:
            self.on_update(meta)

    def on_refused(self, decision: str, page: int, reason: str) -> None:
        """A proposal of this policy was refused (``reason``: the spec's refusal or "not in tier")."""

    def propose(self, decision: str) -> Iterator[int]:
        """Page ids to take out for ``decision`` (one of DECISIONS), best victim first, lazily."""
        raise NotImplementedError(f"{type(self).__name__} proposes no victims")


class LRUPolicy(EvictionPolicy):
    """Least recently used per tier; on the GPU, pages no live sequence holds go first.

    ``propose`` yields from ordered dicts kept up to date by the notifications: O(1) per
    notification (each page's queue is remembered), no scan per decision beyond the proposals the
    runtime consumes.  A page whose holders or pool membership changed is re-placed when the next
    decision needs the queues (a prefix attached and freed between two decisions costs nothing);
    re-placing appends it, as an immediate move would.
    """

    name = "lru"

    def __init__(self) -> None:
        self.order: dict[str, OrderedDict[int, None]] = {
            "gpu_cold": OrderedDict(), "gpu_hot": OrderedDict(), "host": OrderedDict(), "disk": OrderedDict(),
            "pool": OrderedDict(),
        }
        self.where: dict[int, str] = {}  # page -> its tier queue
        self.metas: dict[int, PageMeta] = {}
        self.dirty: set[int] = set()  # pages whose holders or pool membership changed since the last decision

    def _flush(self) -> None:
        if self.dirty:
            metas = self.metas
            for page in self.dirty:
                meta = metas.get(page)
                if meta is not None:
                    self._place(meta)
            self.dirty.clear()

    @staticmethod
    def _queue(meta: PageMeta) -> str | None:
        tier = meta.tier
        if tier == "gpu":
            return "gpu_hot" if meta.holders else "gpu_cold"
        return tier if tier in ("host", "disk") else None

    def _place(self, meta: PageMeta) -> None:
        page = meta.page
        queue = self._queue(meta)
        old = self.where.get(page)
        if old != queue:
            if old is not None:
                del self.order[old][page]
            if queue is None:
                del self.where[page]
            else:
                self.order[queue][page] = None
                self.where[page] = queue
        pool = self.order["pool"]
        if meta.pooled:
            pool.setdefault(page, None)
        else:
            pool.pop(page, None)

    def on_insert(self, meta: PageMeta) -> None:
        self.metas[meta.page] = meta
        self._place(meta)

    def on_access(self, meta: PageMeta, now: int) -> None:
        queue = self.where.get(meta.page)
        if queue is not None:
            self.order[queue].move_to_end(meta.page)
        if meta.pooled and meta.page in self.order["pool"]:
            self.order["pool"].move_to_end(meta.page)

    def on_access_many(self, metas: Sequence[PageMeta], now: int) -> None:
        where = self.where
        by_queue: dict[str, list[int]] = {}
        for meta in metas:
            queue = where.get(meta.page)
            if queue is not None:
                by_queue.setdefault(queue, []).append(meta.page)
        for queue, pages in by_queue.items():
            deque(map(self.order[queue].move_to_end, pages), maxlen=0)
        pool = self.order["pool"]
        deque(map(pool.move_to_end, [m.page for m in metas if m.pooled and m.page in pool]), maxlen=0)

    def on_update(self, meta: PageMeta) -> None:
        self.metas[meta.page] = meta
        self.dirty.add(meta.page)

    def on_update_many(self, metas: Sequence[PageMeta]) -> None:
        self.dirty.update(m.page for m in metas)

    def on_move(self, meta: PageMeta, old_tier: str) -> None:
        self.metas[meta.page] = meta
        self.dirty.discard(meta.page)
        self._place(meta)

    def on_remove(self, meta: PageMeta) -> None:
        queue = self.where.pop(meta.page, None)
        if queue is not None:
            del self.order[queue][meta.page]
        self.order["pool"].pop(meta.page, None)
        self.metas.pop(meta.page, None)
        self.dirty.discard(meta.page)

    def propose(self, decision: str) -> Iterator[int]:
        self._flush()
        names = ("gpu_cold", "gpu_hot") if decision == "gpu" else (decision,)
        seen: set[int] = set()
        for name in names:
            yield from _fresh(self.order[name], seen)


def _fresh(queue: OrderedDict[int, None], seen: set[int], chunk: int = 64) -> Iterator[int]:
    """The queue's ids in order, each once, while the consumer may change the queue between proposals
    (read a chunk at a time from the front; what was already proposed is skipped)."""
    while True:
        batch = [p for p in islice(queue, len(seen) + chunk) if p not in seen]
        if not batch:
            return
        for pid in batch:
            if pid in queue and pid not in seen:
                seen.add(pid)
                yield pid


POLICIES: dict[str, Callable[[], EvictionPolicy]] = {"lru": LRUPolicy}
"""Policies ``RuntimeConfig(policy=NAME)`` can name; add one with ``register_policy``."""


def register_policy(name: str, factory: Callable[[], EvictionPolicy]) -> None:
    """Make ``RuntimeConfig(policy=name)`` build its policy with ``factory()``."""
    POLICIES[name] = factory


def make_policy(policy: str | EvictionPolicy) -> EvictionPolicy:
    """The policy instance a configuration names (a registered name, or an instance used as is)."""
    if isinstance(policy, EvictionPolicy):
        return policy
    from .errors import ConfigError

    factory = POLICIES.get(policy) if isinstance(policy, str) else None
    if factory is None:
        raise ConfigError(f"RuntimeConfig.policy must be an EvictionPolicy or one of {sorted(POLICIES)}, "
                          f"got {policy!r}")
    return factory()
