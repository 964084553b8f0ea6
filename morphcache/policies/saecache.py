"""SAECache: semantic-adaptive eviction (Fang et al., "Not All Tokens Are Worth Caching: Learning
Semantic-Aware Eviction for LLM Prefix Caches", arXiv 2605.18825, 2026), written from the paper's
description of its three parts (only its abstract was available: the formulas below are this
project's reading of that description, not the paper's equations).

1. Multi-queue routing.  Each page goes to the queue of its task, and each queue has the priority
   metric that fits the task's reuse.  A *session* queue (multi-turn traffic: a page is worth
   keeping while its conversation may come back) values a page by its reuse probability alone; a
   *structural* queue (templated single-turn traffic: a page is worth keeping if other requests
   keep reusing it) multiplies in a frequency factor ``(reuses + 1) / (reuses + 2)``.  A task's
   queue is of the session kind once a quarter of its requests continue an earlier request's
   session (a new ``writer`` in a known ``session``).
2. Semantic token weighting.  A page's reuse probability ``P`` comes from its binding token type,
   its queue, its position and fixed features (learning.ReuseModel); the per-type weights
   ``omega`` are learned online from eviction feedback: each evicted page leaves a ghost (its chain
   hash) for as many evictions as its tier holds pages; the page coming back is a regretted
   eviction (outcome 1), the ghost expiring a good one (outcome 0).
3. Everything adapted online.  Log-normal timing: for every (queue, token type) the gaps between
   successive uses of a page are fitted online (a session queue's inter-request gaps seed its
   types' fits); ``F = fit.cdf(T)``, the probability that a reuse comes within ``T`` (the ticks one
   turnover of the tier currently takes), enters ``P`` as a fixed feature, so a conversation that
   returns after minutes is worth little to a cache that turns over in seconds.  The position
   decay power ``beta``, the queue weights and the estimators' memory are learned
   with ``omega`` (learning.py).

The key of a page for a decision (lower leaves first), on the tier's entry clock (scored.py)::

    key = anchor + turnover * P(page)           turnover = pages in the decision's tier

so a page certain to return is kept one more turnover than a dead one, and pages of equal ``P``
leave in LRU order (deepest first among a request's pages).  Keys read the parameters of the
current *epoch*; every ``max(256, pages / 2)`` proposals the policy checks whether a parameter
moved by more than 20% and, if so, starts a new epoch and re-keys every page (O(pages), rare).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from morphcache.policies.learning import P_MAX, P_MIN, OnlineLogNormal, Outcome, ReuseModel
from morphcache.policies.scored import PageRecord, ScoredPolicy
from morphcache.runtime.policy import DECISIONS, PageMeta

SESSION_SHARE = 0.25  # follow-up share of a task's requests that makes its queue a session queue
SESSIONS_KEPT = 4096  # sessions remembered at least (more while more pages are cached)
PRIOR_MU, PRIOR_SIGMA = math.log(1024.0), 1.5  # timing prior before a queue saw any gap


class QueueState:
    """One task's queue: its request counts and its sessions' inter-request gaps."""

    __slots__ = ("requests", "follow_ups", "session_gaps")

    def __init__(self) -> None:
        self.requests = 0
        self.follow_ups = 0
        self.session_gaps = OnlineLogNormal(PRIOR_MU, PRIOR_SIGMA)

    @property
    def kind(self) -> str:
        """"session" or "structural"."""
        return "session" if self.requests and self.follow_ups >= SESSION_SHARE * self.requests else "structural"


@dataclass
class Ghost:
    """An evicted page, remembered by its chain hash until it returns or expires."""

    queue: str
    kind: str
    depth: int
    factor: float


class SAECachePolicy(ScoredPolicy):
    """Semantic-adaptive eviction (see the module docstring)."""

    name = "saecache"

    def __init__(self) -> None:
        super().__init__()
        self.model = ReuseModel()
        self.queues: dict[str, QueueState] = {}
        self.timing: dict[tuple[str, str], OnlineLogNormal] = {}
        self.sessions: OrderedDict[str, tuple[str | None, float]] = OrderedDict()  # -> (writer, last active)
        self.ghosts: dict[str, OrderedDict[int, Ghost]] = {d: OrderedDict() for d in DECISIONS}
        self.ghosted: dict[int, int] = {}  # hash -> how many decisions hold a ghost of it
        self.pending: dict[int, str] = {}  # page -> decision it was last proposed for
        self.hashed: set[int] = set()  # pages whose chain hash the policy has seen
        self.regrets = 0
        self.since_rekey = 0
        # parameters as read at the start of the epoch (until the next re-key)
        self.base_of: dict[tuple[str, str, str], float] = {}  # (queue, type, decision) -> w * omega * F
        self.decay_of: list[float] = []  # depth -> (1 + depth) ** -beta
        self.binding_of: dict[frozenset[str], str] = {}

    # -- routing and keys ---------------------------------------------------------------------------
    def queue_of(self, meta: PageMeta, rec: PageRecord) -> str:
        q = meta.task or ""
        if q not in self.queues:
            self.queues[q] = QueueState()
        return q

    def fit(self, queue: str, kind: str) -> OnlineLogNormal:
        """The timing fit of (queue, token type), seeded from the queue's session gaps."""
        fit = self.timing.get((queue, kind))
        if fit is None:
            q = self.queues.get(queue)
            seed = q.session_gaps if q is not None and q.kind == "session" else None
            fit = OnlineLogNormal(seed.mu if seed else PRIOR_MU, seed.sigma if seed else PRIOR_SIGMA)
            self.timing[(queue, kind)] = fit
        return fit

    def new_epoch(self) -> None:
        """Read the learned parameters afresh (keys pushed from now on use them)."""
        self.base_of.clear()
        self.decay_of.clear()
        self.binding_of.clear()

    def drifted(self) -> bool:
        """Whether a parameter the keys were computed with moved by more than 20% (or beta by 0.05)."""
        if self.decay_of and len(self.decay_of) > 1 and abs(math.log(self.decay_of[1]) / -math.log(2.0)
                                                             - self.model.beta) > 0.05:
            return True
        for (queue, kind, decision), base in self.base_of.items():
            now = self.model.weight(queue) * self.model.omega(kind)
            now *= self.fit(queue, kind).cdf(self.turnover_ticks(decision))
            if abs(now - base) > 0.2 * max(base, 0.02):
                return True
        return False

    def binding(self, types: frozenset[str]) -> str:
        """The page's binding type, as of this epoch."""
        kind = self.binding_of.get(types)
        if kind is None:
            kind = self.binding_of[types] = self.model.binding(types)
        return kind

    def factor(self, meta: PageMeta, queue: str, kind: str, decision: str) -> float:
        """The fixed features of ``P``: a reuse within one turnover of the tier, times the structural
        frequency factor (1 in a session queue)."""
        f = self.fit(queue, kind).cdf(self.turnover_ticks(decision))
        if self.queues[queue].kind != "session":
            reuses = max(0, meta.uses - 1)
            f *= (reuses + 1.0) / (reuses + 2.0)
        return f

    def probability(self, meta: PageMeta, queue: str, decision: str) -> float:
        """``P`` of the page for ``decision``, with the parameters of this epoch."""
        kind = self.binding(meta.types)
        base = self.base_of.get((queue, kind, decision))
        if base is None:
            base = self.model.weight(queue) * self.model.omega(kind)
            base *= self.fit(queue, kind).cdf(self.turnover_ticks(decision))
            self.base_of[(queue, kind, decision)] = base
        decay = self.decay_of
        d = meta.depth
        while len(decay) <= d:
            decay.append((1.0 + len(decay)) ** -self.model.beta)
        p = base * decay[d]
        if self.queues[queue].kind != "session":
            reuses = max(0, meta.uses - 1)
            p *= (reuses + 1.0) / (reuses + 2.0)
        return P_MAX if p > P_MAX else (P_MIN if p < P_MIN else p)

    def key(self, meta: PageMeta, rec: PageRecord, decision: str) -> float:
        anchor = rec.pool_anchor if decision == "pool" else rec.anchor
        return anchor + self.turnover(decision) * self.probability(meta, rec.queue, decision)

    # -- notifications ------------------------------------------------------------------------------
    def on_insert(self, meta: PageMeta) -> None:
        known = meta.page in self.records
        if meta.hash is not None:
            self.hashed.add(meta.page)
        super().on_insert(meta)
        if meta.session is not None and not known:
            self._session_activity(meta)
        self._check_return(meta)

    def on_access(self, meta: PageMeta, now: int) -> None:
        rec = self.records.get(meta.page)
        if rec is not None and not meta.holders and now > rec.last:  # a reuse, not the writer's own touch
            self.fit(rec.queue, self.binding(meta.types)).observe(now - rec.last)
        self._check_return(meta)
        super().on_access(meta, now)

    def on_update(self, meta: PageMeta) -> None:
        self._evicted(meta)
        if meta.hash is not None and meta.page not in self.hashed:  # sealed now: written anew, a return
            self.hashed.add(meta.page)  # (any other update, a pool eviction included, is no use of the page)
            self._check_return(meta)
        super().on_update(meta)

    def on_move(self, meta: PageMeta, old_tier: str) -> None:
        self._evicted(meta, old_tier)
        super().on_move(meta, old_tier)

    def on_remove(self, meta: PageMeta) -> None:
        self.hashed.discard(meta.page)
        decision = self.pending.get(meta.page)
        if decision is not None:
            self._ghost(meta, decision)
        super().on_remove(meta)

    def on_refused(self, decision: str, page: int, reason: str) -> None:
        self.pending.pop(page, None)

    def propose(self, decision: str) -> Iterator[int]:
        self.since_rekey += 1
        if self.since_rekey >= max(256, len(self.records) // 2):
            self.since_rekey = 0
            if self.drifted():
                self.new_epoch()
                self.rekey_all()
        for page in super().propose(decision):
            self.pending[page] = decision
            yield page

    def stats(self) -> dict[str, float]:
        out = super().stats()
        out["beta"] = self.model.beta
        out["memory"] = self.model.memory
        out["outcomes"] = float(self.model.outcomes)
        out["returns"] = float(self.model.returns)
        for kind in sorted(self.model.types):
            out[f"omega[{kind or 'untyped'}]"] = self.model.omega(kind)
        for name, q in sorted(self.queues.items()):
            label = name or "untyped"
            out[f"w[{label}]"] = self.model.weight(name)
            out[f"session_kind[{label}]"] = 1.0 if q.kind == "session" else 0.0
        for (name, kind), fit in sorted(self.timing.items()):
            out[f"median_gap[{name or 'untyped'}/{kind or 'untyped'}]"] = fit.quantile(0.0)
        out["turnover_ticks[gpu]"] = self.turnover_ticks("gpu")
        return out

    # -- feedback -----------------------------------------------------------------------------------
    def _session_activity(self, meta: PageMeta) -> None:
        """Count a new request of the page's session (and the gap since the session was last active)."""
        assert meta.session is not None
        queue = self.queues[self.queue_of(meta, self.records[meta.page])]
        st = self.sessions.get(meta.session)
        if st is None:
            queue.requests += 1
        elif st[0] != meta.writer:
            queue.requests += 1
            queue.follow_ups += 1
            if self.now > st[1]:
                queue.session_gaps.observe(self.now - st[1])
        self.sessions[meta.session] = (meta.writer, self.now)
        self.sessions.move_to_end(meta.session)
        while len(self.sessions) > max(SESSIONS_KEPT, 2 * len(self.records)):
            self.sessions.popitem(last=False)

    def _evicted(self, meta: PageMeta, old_tier: str | None = None) -> None:
        """Record a ghost if the page just left the tier (or the pool) it was proposed for."""
        decision = self.pending.get(meta.page)
        if decision is None:
            return
        left = not meta.pooled if decision == "pool" else old_tier == decision and meta.tier != decision
        if left:
            self._ghost(meta, decision)

    def _ghost(self, meta: PageMeta, decision: str) -> None:
        self.pending.pop(meta.page, None)
        if meta.hash is None:
            return
        rec = self.records.get(meta.page)
        queue = rec.queue if rec is not None else self.queue_of(meta, PageRecord(meta))
        kind = self.model.binding(meta.types)
        ghosts = self.ghosts[decision]
        if meta.hash not in ghosts:
            self.ghosted[meta.hash] = self.ghosted.get(meta.hash, 0) + 1
        ghosts[meta.hash] = Ghost(queue, kind, meta.depth, self.factor(meta, queue, kind, decision))
        ghosts.move_to_end(meta.hash)
        limit = self.turnover(decision)
        while len(ghosts) > limit:
            h, old = ghosts.popitem(last=False)
            self._unghost(h)
            self.model.learn(Outcome(old.queue, old.kind, old.depth, old.factor, False))

    def _unghost(self, h: int) -> None:
        left = self.ghosted[h] - 1
        if left:
            self.ghosted[h] = left
        else:
            del self.ghosted[h]

    def _check_return(self, meta: PageMeta) -> None:
        """A page whose hash has a ghost is used again (looked up, read, or written anew and sealed):
        each such eviction is regretted.  Called on those uses only: the update that evicts a page
        (it leaves the pool) must not count as its return."""
        h = meta.hash
        if h is None or h not in self.ghosted:
            return
        for ghosts in self.ghosts.values():
            ghost = ghosts.pop(h, None)
            if ghost is not None:
                self._unghost(h)
                self.regrets += 1
                self.model.learn(Outcome(ghost.queue, ghost.kind, ghost.depth, ghost.factor, True))
