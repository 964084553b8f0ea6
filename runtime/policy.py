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
written, in flight; a captured batch's pages while its leases pin them) or that names no page of
that tier is *refused and counted* (``policy_refusals`` in the metrics), never obeyed, and the next
proposal is tried.  A policy can
lose performance; it can never make an illegal read happen.

Page metadata (``PageMeta``) is owned and updated by the runtime; policies read it and must not
write it.  The clock is logical: it ticks once per lookup, write or read the runtime serves.
``meta.tier`` is ``"gpu"``, ``"host"``, ``"disk"``, ``"dropped"`` or a state in between
(``"offloading"``, ``"prefetching"``): a page in between belongs to no decision's tier.

``make_policy`` turns ``RuntimeConfig(policy=...)`` into an instance: an ``EvictionPolicy`` is
used as is, a name is looked up among the registered factories (``"lru"`` here; ``"flop"``,
``"semantic"`` and ``"saecache"`` register themselves when ``morphcache.policies`` is imported,
which ``make_policy`` does on the first unknown name).  The default, ``LRUPolicy``, the one every
other policy is written against, lives in ``lru.py`` and is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import islice

from .errors import ConfigError

DECISIONS = ("gpu", "host", "disk", "pool")


class PageMeta:
    """What a policy may know about one page.

    ``types``: the token types the page contains (``"system"``, ``"user"``, ``"tool"``,
    ``"response"``, ``"reasoning"`` or any tag the engine used; empty when untyped);
    ``session`` / ``task``: the ids of the request that wrote it; ``writer``: the id of the
    sequence whose append wrote it (one request: a policy tells a session's turns apart by it);
    ``holders``: live sequences whose block table holds it; ``recovery_tokens``: tokens a
    recompute of it would prefill; ``bytes``: what it occupies on its tier; ``hash``: its chain
    hash once sealed (None while filling), stable across evictions, so a policy can recognise a
    page that comes back.
    """

    __slots__ = ("page", "depth", "tokens", "types", "session", "task", "writer", "created", "last_use", "uses",
                 "tier", "bytes", "recovery_tokens", "pooled", "holders", "hash")

    def __init__(self, page: int, depth: int, *, tokens: int = 0, types: frozenset[str] = frozenset(),
                 session: str | None = None, task: str | None = None, writer: str | None = None,
                 created: int = 0, tier: str = "gpu", bytes: int = 0, recovery_tokens: int = 0) -> None:
        self.page = page
        self.depth = depth
        self.tokens = tokens
        self.types = types
        self.session = session
        self.task = task
        self.writer = writer
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
    pure_proposals = False  # ``propose`` changes nothing a later proposal or notification depends on
    merges_writes = False  # ``on_written`` takes a write's notices with every ``meta`` as it is after them

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

    def on_move_many(self, metas: Sequence[PageMeta], old_tiers: Sequence[str]) -> None:
        """``on_move`` for each of many distinct pages, in order (a room's victims moved at once; every
        page's ``tier`` already written).  A policy that overrides it is told so, in bulk; one that does
        not is told one page at a time, each ``tier`` written as it is told."""
        for meta, old in zip(metas, old_tiers, strict=True):
            self.on_move(meta, old)

    def on_access_many(self, metas: Sequence[PageMeta], now: int) -> None:
        """``on_access`` for each page of a lookup's hit or a lease's read (override to do it in bulk)."""
        for meta in metas:
            self.on_access(meta, now)

    def on_update_many(self, metas: Sequence[PageMeta]) -> None:
        """``on_update`` for each of many pages (a prefix attached or freed at once)."""
        for meta in metas:
            self.on_update(meta)

    def on_sealed_many(self, metas: Sequence[PageMeta]) -> None:
        """Pages took their last token: only their ``hash``, ``tokens``, ``types`` or
        ``recovery_tokens`` changed (not their tier, holders or pool membership).
        ``on_update_many(metas)`` unless overridden."""
        self.on_update_many(metas)

    def on_holders_many(self, metas: Sequence[PageMeta], crossed: Sequence[PageMeta]) -> None:
        """The holders of every page of ``metas`` changed by the same step (a prefix attached, a
        sequence freed); ``crossed`` are those that became held or stopped being held (holders went
        from 0 to 1 or from 1 to 0).  ``on_update_many(metas)`` unless overridden."""
        self.on_update_many(metas)

    def on_remove_many(self, metas: Sequence[PageMeta]) -> None:
        """``on_remove`` for each of many pages forgotten together, in order (override to do it in bulk)."""
        for meta in metas:
            self.on_remove(meta)

    def on_written(self, fresh: Sequence[PageMeta], crossed: Sequence[PageMeta], pages: Sequence[PageMeta],
                   now: int) -> None:
        """A write's notices in one call, for a policy that sets ``merges_writes``: its ``fresh`` pages
        inserted, then held (``crossed``: those that became held, as ``on_holders_many`` takes them),
        then every page it wrote (``pages``, the fresh ones among them) accessed at ``now``; every
        ``meta`` already as it is after all three.  Unless overridden: the three notices in turn."""
        for meta in fresh:
            self.on_insert(meta)
        if fresh:
            self.on_holders_many(fresh, crossed)
        self.on_access_many(pages, now)

    def on_refused(self, decision: str, page: int, reason: str) -> None:
        """A proposal of this policy was refused (``reason``: the spec's refusal or "not in tier")."""

    def propose(self, decision: str) -> Iterator[int]:
        """Page ids to take out for ``decision`` (one of DECISIONS), best victim first, lazily."""
        raise NotImplementedError(f"{type(self).__name__} proposes no victims")

    def propose_first(self, decision: str, k: int) -> list[int]:
        """The first ``k`` proposals of ``propose(decision)`` (fewer if it has fewer), for a policy whose
        proposals have no side effect (``pure_proposals``): nothing changes while they are read."""
        return list(islice(self.propose(decision), k))

    def stats(self) -> dict[str, float]:
        """What the policy has learned or counted, for reports (empty for a policy with no state worth
        showing)."""
        return {}


_FACTORIES: dict[str, Callable[[], EvictionPolicy]] = {}  # "lru" registered below, once its module is loaded


def register_policy(name: str, factory: Callable[[], EvictionPolicy]) -> None:
    """Make ``make_policy(name)`` build a fresh policy with ``factory``."""
    _FACTORIES[name] = factory


def policy_names() -> tuple[str, ...]:
    """The registered policy names (the shipped ones included)."""
    _load_shipped()
    return tuple(sorted(_FACTORIES))


def make_policy(policy: EvictionPolicy | str) -> EvictionPolicy:
    """``policy`` itself, or a fresh instance of the policy registered under that name; ConfigError
    for an unknown name or anything else."""
    if isinstance(policy, EvictionPolicy):
        return policy
    if not isinstance(policy, str):
        raise ConfigError(f"policy must be an EvictionPolicy or a name, got {type(policy).__name__}")
    if policy not in _FACTORIES:
        _load_shipped()
    factory = _FACTORIES.get(policy)
    if factory is None:
        raise ConfigError(f"unknown policy {policy!r}; known: {', '.join(sorted(_FACTORIES))}")
    return factory()


def _load_shipped() -> None:
    import morphcache.policies  # noqa: F401  (registers flop, semantic, saecache)


from .lru import LRUPolicy  # noqa: E402  (the default, defined against the interface above)

register_policy("lru", LRUPolicy)
