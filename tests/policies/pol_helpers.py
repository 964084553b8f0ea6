"""Helpers of the policy tests (and of the runtime's policy tests): a deliberately bad policy, a
contract-checking wrapper, and a factory of every shipped policy.

``BadPolicy`` proposes, for every decision, the pages a test names (pinned, in flight, captured:
whatever the runtime must refuse), then page ids it was never told about, then pages it knows in
other tiers, and only then falls back to LRU so the runtime can still make progress.  Every
decision it is asked (with the targets it proposed first) and every refusal it hears of is recorded.

``ContractPolicy`` wraps a policy and raises ``AssertionError`` as soon as the runtime breaks the
notification contract (a notification for a page never inserted or already removed, an insert of
a known page, an unknown tier) or the wrapped policy proposes a page the runtime never inserted,
removed or not in the decision's tier.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from morphcache.policies import FlopAwarePolicy, SAECachePolicy, SemanticPolicy
from morphcache.runtime.policy import DECISIONS, EvictionPolicy, LRUPolicy, PageMeta

TIER_STATES = ("gpu", "host", "disk", "dropped", "offloading", "prefetching")
UNKNOWN_PAGE = 10**9


def shipped_policies() -> dict[str, Callable[[], EvictionPolicy]]:
    """A fresh instance of every shipped policy, by name."""
    return {"lru": LRUPolicy, "flop": FlopAwarePolicy, "semantic": SemanticPolicy, "saecache": SAECachePolicy}


class BadPolicy(EvictionPolicy):
    """Proposes what the runtime must refuse first (see the module docstring)."""

    name = "bad"

    def __init__(self, targets: Callable[[], Iterable[int]] = tuple) -> None:
        self.targets = targets
        self.fallback = LRUPolicy()
        self.tiers: dict[int, str] = {}
        self.refused: list[tuple[str, int, str]] = []
        self.decisions: list[tuple[str, tuple[int, ...]]] = []  # each decision asked, with its targets

    def on_insert(self, meta: PageMeta) -> None:
        self.tiers[meta.page] = meta.tier
        self.fallback.on_insert(meta)

    def on_access(self, meta: PageMeta, now: int) -> None:
        self.fallback.on_access(meta, now)

    def on_update(self, meta: PageMeta) -> None:
        self.fallback.on_update(meta)

    def on_move(self, meta: PageMeta, old_tier: str) -> None:
        self.tiers[meta.page] = meta.tier
        self.fallback.on_move(meta, old_tier)

    def on_remove(self, meta: PageMeta) -> None:
        self.tiers.pop(meta.page, None)
        self.fallback.on_remove(meta)

    def on_refused(self, decision: str, page: int, reason: str) -> None:
        self.refused.append((decision, page, reason))

    def propose(self, decision: str) -> Iterator[int]:
        targets = tuple(self.targets())
        self.decisions.append((decision, targets))
        yield from targets
        yield UNKNOWN_PAGE
        yield from [p for p, t in self.tiers.items() if t != decision]
        yield from self.fallback.propose(decision)


class ContractPolicy(EvictionPolicy):
    """Checks the notification contract around ``inner`` (see the module docstring)."""

    def __init__(self, inner: EvictionPolicy) -> None:
        self.inner = inner
        self.name = inner.name
        self.known: dict[int, PageMeta] = {}
        self.proposals = 0

    def _check(self, meta: PageMeta, what: str) -> None:
        assert meta.page in self.known, f"{what} of page {meta.page}, never inserted or already removed"
        assert meta.tier in TIER_STATES, f"{what} of page {meta.page}: unknown tier {meta.tier!r}"

    def on_insert(self, meta: PageMeta) -> None:
        assert meta.page not in self.known, f"insert of page {meta.page}, already known"
        self.known[meta.page] = meta
        self._check(meta, "insert")
        self.inner.on_insert(meta)

    def on_access(self, meta: PageMeta, now: int) -> None:
        self._check(meta, "access")
        self.inner.on_access(meta, now)

    def on_update(self, meta: PageMeta) -> None:
        self._check(meta, "update")
        self.inner.on_update(meta)

    def on_move(self, meta: PageMeta, old_tier: str) -> None:
        self._check(meta, "move")
        assert old_tier in TIER_STATES and old_tier != meta.tier, f"move of page {meta.page} from {old_tier!r}"
        self.inner.on_move(meta, old_tier)

    def on_remove(self, meta: PageMeta) -> None:
        self._check(meta, "remove")
        del self.known[meta.page]
        self.inner.on_remove(meta)

    def on_refused(self, decision: str, page: int, reason: str) -> None:
        assert decision in DECISIONS
        self.inner.on_refused(decision, page, reason)

    def propose(self, decision: str) -> Iterator[int]:
        assert decision in DECISIONS
        for pid in self.inner.propose(decision):
            meta = self.known.get(pid)
            assert meta is not None, f"{self.name} proposed page {pid} for {decision}: unknown or removed"
            if decision == "pool":
                assert meta.pooled, f"{self.name} proposed page {pid} for the pool: not pooled"
            else:
                assert meta.tier == decision, f"{self.name} proposed page {pid} for {decision}: it is on {meta.tier}"
            self.proposals += 1
            yield pid

    def stats(self) -> dict[str, float]:
        return self.inner.stats()
