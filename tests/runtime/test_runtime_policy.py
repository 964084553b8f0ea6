"""The policy seam: every victim choice asks ``config.policy``; proposals the spec (or the runtime)
refuses are counted and skipped; pages carry their token types, session and task."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import small_config, toks

from morphcache.runtime import (
    CacheManager,
    ConfigError,
    EvictionPolicy,
    LRUPolicy,
    PageMeta,
    RuntimeConfig,
    policy_names,
    register_policy,
)


class Recording(LRUPolicy):
    """LRU that first proposes every page it knows, pinned or not, and records what the runtime says."""

    name = "recording"

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[tuple[str, int, str]] = []
        self.known: dict[int, PageMeta] = {}
        self.decisions: list[str] = []

    def on_insert(self, meta: PageMeta) -> None:
        self.known[meta.page] = meta
        super().on_insert(meta)

    def on_remove(self, meta: PageMeta) -> None:
        self.known.pop(meta.page, None)
        super().on_remove(meta)

    def on_refused(self, decision: str, page: int, reason: str) -> None:
        self.refused.append((decision, page, reason))

    def propose(self, decision: str) -> Iterator[int]:
        self.decisions.append(decision)
        yield from sorted(self.known)  # pinned, filling and protected pages first: the runtime must refuse
        yield from super().propose(decision)


def test_refused_proposals_are_counted_and_skipped(make_manager: Callable[..., CacheManager]) -> None:
    policy = Recording()
    m = make_manager(gpu_pages=4, host_pages=8, policy=policy)
    m.register("a", toks(0, 9))  # pages 0, 1 sealed, 2 filling
    lease = m.acquire("a")  # pins all three
    m.register("b", toks(100, 4))  # one more page: the GPU is full, a victim is needed
    m.register("c", toks(200, 4))
    assert "gpu" in policy.decisions
    reasons = {reason for _, _, reason in policy.refused}
    assert any("spec refuses" in r for r in reasons), reasons  # pinned pages: offload and drop refused
    assert m.metrics().policy_refusals == len(policy.refused) > 0
    assert all(m.page_state(p)["tier"] == "gpu" for p in lease.pinned)  # no pinned page moved
    m.release(lease)
    m.check_integrity()


def test_policy_by_name_instance_or_registered(tmp_path: object) -> None:
    assert isinstance(CacheManager(config=RuntimeConfig(policy="lru")).parts.seam.policy, LRUPolicy)
    mine = LRUPolicy()
    assert CacheManager(config=RuntimeConfig(policy=mine)).parts.seam.policy is mine
    with pytest.raises(ConfigError, match="policy"):
        RuntimeConfig(policy="nope")
    register_policy("recording", Recording)
    m = CacheManager(config=RuntimeConfig(policy="recording"))
    assert isinstance(m.parts.seam.policy, Recording)
    assert issubclass(Recording, EvictionPolicy)
    assert {"lru", "recording", "flop", "semantic", "saecache"} <= set(policy_names())


def test_pages_carry_types_session_and_task(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager()
    m.register("a", toks(0, 6), types=[(0, 3, "system"), (3, 6, "user")], session="chat-1", task="qa")
    m.append("a", toks(6, 4), types=[(0, 4, "response")])
    metas = [m.page_state(p)["meta"] for p in m.sequence_pages("a")]
    assert [sorted(meta.types) for meta in metas] == [["system", "user"], ["response", "user"], ["response"]]
    assert {(meta.session, meta.task, meta.writer) for meta in metas} == {("chat-1", "qa", "a")}
    assert [meta.holders for meta in metas] == [1, 1, 1] and all(meta.hash is not None for meta in metas[:2])
    assert metas[2].hash is None  # still filling
    from morphcache.runtime import BadInputError

    with pytest.raises(BadInputError, match="type span"):
        m.append("a", [1, 2], types=[(1, 5, "user")])
    m.check_integrity()


def test_lru_keeps_its_order_with_pages_held_and_freed(make_manager: Callable[..., CacheManager]) -> None:
    """The default policy: cold pages (held by no sequence) leave the GPU before pages a live sequence
    holds, least recently used first."""
    m = make_manager(gpu_pages=4, host_pages=8, pool_capacity=8)
    m.register("old", toks(0, 8))
    m.free("old")  # two cold pooled pages
    m.register("live", toks(100, 8))  # two hot pages
    m.register("new", toks(200, 8))  # two more pages need room: the cold ones go first
    assert [m.page_state(p)["tier"] for p in m.cached_pages()[:2]] == ["host", "host"]
    assert all(m.page_state(p)["tier"] == "gpu" for p in m.sequence_pages("live"))
    m.check_integrity()


def inserted(metas: dict[int, tuple[PageMeta, PageMeta]], pols: tuple[EvictionPolicy, EvictionPolicy],
             pids: list[int], pooled_every: int, held_every: int = 0) -> None:
    """Both policies told of each new page of ``pids`` (a copy of its metadata each, kept in ``metas``):
    pooled when its id is a multiple of ``pooled_every``, held (one holder) when one of ``held_every``."""
    for pid in pids:
        if pid not in metas:
            metas[pid] = (PageMeta(pid, 0), PageMeta(pid, 0))
            for meta, pol in zip(metas[pid], pols, strict=True):
                meta.pooled = pid % pooled_every == 0
                if held_every:
                    meta.holders = pid % held_every == 0
                pol.on_insert(meta)


def moved(pair: tuple[PageMeta, PageMeta], pols: tuple[EvictionPolicy, EvictionPolicy], tier: str) -> None:
    """Both policies told that their copy of a page moved to ``tier`` (nothing when it is there)."""
    for meta, pol in zip(pair, pols, strict=True):
        if meta.tier != tier:
            old, meta.tier = meta.tier, tier
            pol.on_move(meta, old)


def updated(pair: tuple[PageMeta, PageMeta], pols: tuple[EvictionPolicy, EvictionPolicy], pooled: bool,
            holders: int) -> None:
    """Both policies told of a page's new pool membership and holder count."""
    for meta, pol in zip(pair, pols, strict=True):
        meta.pooled, meta.holders = pooled, holders
        pol.on_update(meta)


def removed(pair: tuple[PageMeta, PageMeta], pols: tuple[EvictionPolicy, EvictionPolicy]) -> None:
    """Both policies told that a page is forgotten."""
    for meta, pol in zip(pair, pols, strict=True):
        pol.on_remove(meta)


def moved_many(moves: list[tuple[tuple[PageMeta, PageMeta], str]], bulk: EvictionPolicy,
               single: EvictionPolicy) -> None:
    """Pages moved to new tiers: ``bulk`` told in one ``on_move_many``, ``single`` page by page."""
    group, olds = [], []
    for (a, b), tier in moves:
        olds.append(a.tier)
        a.tier = tier
        group.append(a)
        old, b.tier = b.tier, tier
        single.on_move(b, old)
    if group:
        bulk.on_move_many(group, olds)


DECISIONS = ("gpu", "host", "disk", "pool")


def same_proposals(a: EvictionPolicy, b: EvictionPolicy, decision: str, step: int | None = None) -> None:
    """Both policies propose the same victims, in the same order, for ``decision``."""
    assert list(a.propose(decision)) == list(b.propose(decision)), (step, decision)


def same_order(a: LRUPolicy, b: LRUPolicy) -> None:
    """Both LRUs propose alike for every decision and hold every queue in the same order."""
    for decision in DECISIONS:
        same_proposals(a, b, decision)
    assert {k: list(q) for k, q in a.order.items()} == {k: list(q) for k, q in b.order.items()}


def test_lru_holders_in_bulk_files_pages_as_updates_do() -> None:
    """``on_holders_many`` (a prefix attached or freed: only the pages that became held or unheld change
    queue) leaves LRU's order exactly as ``on_update_many`` over the same pages would."""
    import random

    rng = random.Random(7)
    bulk, single = LRUPolicy(), LRUPolicy()
    metas: dict[int, tuple[PageMeta, PageMeta]] = {}
    for step in range(600):
        op = rng.random()
        if op < 0.2 or not metas:
            pid = step
            pair = (PageMeta(pid, 0), PageMeta(pid, 0))
            for meta, pol in zip(pair, (bulk, single), strict=True):
                meta.pooled = pid % 3 == 0
                pol.on_insert(meta)
            metas[pid] = pair
        elif op < 0.6:
            pids = rng.sample(sorted(metas), min(len(metas), rng.randint(1, 6)))
            delta = rng.choice([1, -1]) if all(metas[p][0].holders for p in pids) else 1
            for meta in (m for p in pids for m in metas[p]):
                meta.holders += delta
            group = [metas[p][0] for p in pids]
            bulk.on_holders_many(group, [m for m in group if m.holders == (1 if delta > 0 else 0)])
            single.on_update_many([metas[p][1] for p in pids])
        elif op < 0.8:
            pid = rng.choice(sorted(metas))
            tier = rng.choice(["gpu", "host", "disk", "dropped"])
            moved(metas[pid], (bulk, single), tier)
        else:
            pids = rng.sample(sorted(metas), min(len(metas), 3))
            bulk.on_access_many([metas[p][0] for p in pids], step)
            single.on_access_many([metas[p][1] for p in pids], step)
        for decision in DECISIONS:
            same_proposals(bulk, single, decision, step)


@pytest.mark.parametrize("seed", range(3))
def test_lru_decision_applies_only_its_queues_touches_with_the_same_order(seed: int) -> None:
    """A decision applies the buffered touches of the queues it reads (the tier queues, or the pool's);
    the others wait.  Proposals equal those of a policy that applies every touch at every decision."""
    import random

    rng = random.Random(seed)
    lazy, eager = LRUPolicy(), LRUPolicy()
    metas: dict[int, tuple[PageMeta, PageMeta]] = {}
    for step in range(1500):
        op = rng.random()
        if op < 0.15 or not metas:
            pid = rng.randrange(400)
            if pid in metas:
                continue
            pair = (PageMeta(pid, 0), PageMeta(pid, 0))
            for meta, pol in zip(pair, (lazy, eager), strict=True):
                pol.on_insert(meta)
            metas[pid] = pair
        elif op < 0.35:
            pid = rng.choice(sorted(metas))
            tier = rng.choice(["gpu", "host", "disk", "dropped", "offloading"])
            moved(metas[pid], (lazy, eager), tier)
        elif op < 0.5:
            pid = rng.choice(sorted(metas))
            pooled, holders = rng.random() < 0.6, rng.randrange(2)
            updated(metas[pid], (lazy, eager), pooled, holders)
        elif op < 0.75:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([1, 3, 12, 30])))
            for k, pol in enumerate((lazy, eager)):
                pol.on_access_many([metas[p][k] for p in pids], step)
        elif op < 0.8:
            pid = rng.choice(sorted(metas))
            removed(metas.pop(pid), (lazy, eager))
        else:
            decision = rng.choice(DECISIONS)
            eager._flush(True)
            eager._flush(False)
            got, want = list(lazy.propose(decision)), list(eager.propose(decision))
            assert got == want, (step, decision)


@pytest.mark.parametrize("seed", range(3))
def test_lru_touches_filed_in_bulk_give_the_order_filed_one_by_one(seed: int) -> None:
    """Many buffered touches are filed in bulk (numpy; ``LRUPolicy.few`` 0 files every batch so), a few
    in Python: the proposals, queues and stamps are the same either way, the pool's included."""
    import random

    rng = random.Random(seed)
    bulk, single = LRUPolicy(), LRUPolicy()
    bulk.few, single.few = 0, 1 << 30
    metas: dict[int, tuple[PageMeta, PageMeta]] = {}
    for step in range(800):
        op = rng.random()
        if op < 0.2 or not metas:
            inserted(metas, (bulk, single), rng.sample(range(600), rng.choice([1, 5, 40])), pooled_every=3)
        elif op < 0.45:
            for pid in rng.sample(sorted(metas), min(len(metas), rng.choice([1, 4, 30]))):
                tier = rng.choice(["gpu", "host", "disk", "dropped", "offloading"])
                moved(metas[pid], (bulk, single), tier)
        elif op < 0.55:
            pid = rng.choice(sorted(metas))
            pooled, holders = rng.random() < 0.6, rng.randrange(2)
            updated(metas[pid], (bulk, single), pooled, holders)
        elif op < 0.8:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([3, 12, 60, 200])))
            for k, pol in enumerate((bulk, single)):
                pol.on_access_many([metas[p][k] for p in pids], step)
        elif op < 0.85:
            pid = rng.choice(sorted(metas))
            removed(metas.pop(pid), (bulk, single))
        else:
            same_proposals(bulk, single, rng.choice(DECISIONS), step)
            assert bulk.placed == single.placed and bulk.stamp.tobytes() == single.stamp.tobytes()
    same_order(bulk, single)


@pytest.mark.parametrize("seed", range(3))
def test_lru_long_notices_buffered_as_arrays_give_the_order_of_single_touches(seed: int) -> None:
    """A long access buffered behind another keeps its pages as one array (a ``BULK`` marker in the
    touched list), compacted at any moment or not: the proposals and queues are those of the same
    pages touched one ``on_access`` at a time (the stamps differ: a long access stamps every tier touch,
    then the pool's)."""
    import random

    rng = random.Random(seed)
    bulk, single = LRUPolicy(), LRUPolicy()
    metas: dict[int, tuple[PageMeta, PageMeta]] = {}
    for step in range(600):
        op = rng.random()
        if op < 0.15 or not metas:
            inserted(metas, (bulk, single), rng.sample(range(2000), rng.choice([1, 5, 80])), pooled_every=3,
                     held_every=4)
        elif op < 0.6:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([2, 70, 300, 900])))
            bulk.on_access_many([metas[p][0] for p in pids], step)
            for p in pids:
                single.on_access(metas[p][1], step)
        elif op < 0.7:
            pid = rng.choice(sorted(metas))
            removed(metas.pop(pid), (bulk, single))
        elif op < 0.8:
            bulk._compact()
        else:
            same_proposals(bulk, single, rng.choice(DECISIONS), step)
        assert bulk.clock == single.clock, step
    same_order(bulk, single)


@pytest.mark.parametrize("seed", range(3))
def test_lru_write_notices_in_one_call_give_the_order_of_three(seed: int) -> None:
    """``on_written`` (a write's fresh pages inserted and held, then every page it wrote accessed, in one
    call with the metadata already final) leaves LRU's queues and proposals exactly as the three
    notices told in turn, with the metadata as each saw it, do; pooled pages, pages in no queue and
    stale pages mixed in."""
    import random

    rng = random.Random(seed)
    merged, three = LRUPolicy(), LRUPolicy()
    assert merged.merges_writes and not Recording().merges_writes
    metas: dict[int, tuple[PageMeta, PageMeta]] = {}
    for step in range(900):
        op = rng.random()
        if op < 0.35:
            fresh = [p for p in rng.sample(range(500), rng.choice([1, 3, 12])) if p not in metas]
            old = rng.sample(sorted(metas), min(len(metas), rng.choice([0, 1, 2])))
            tier = rng.choice(["gpu", "gpu", "gpu", "host", "dropped"])
            pairs = [(PageMeta(p, 0, tier=tier), PageMeta(p, 0, tier=tier)) for p in fresh]
            for pair in pairs:
                for meta in pair:
                    meta.pooled = rng.random() < 0.05 if meta is pair[0] else pair[0].pooled
            for a, b in pairs:
                three.on_insert(b)
                b.holders = a.holders = 1
            if pairs:
                three.on_holders_many([b for _, b in pairs], [b for _, b in pairs])
            written = [a for a, _ in pairs] + [metas[p][0] for p in old]
            rng.shuffle(written)
            three.on_access_many([metas[m.page][1] if m.page in metas else dict(pairs)[m] for m in written], step)
            merged.on_written([a for a, _ in pairs], [a for a, _ in pairs], written, step)
            metas.update((a.page, (a, b)) for a, b in pairs)
        elif op < 0.55 and metas:
            pid = rng.choice(sorted(metas))
            tier = rng.choice(["gpu", "host", "disk", "dropped"])
            moved(metas[pid], (merged, three), tier)
        elif op < 0.7 and metas:
            pid = rng.choice(sorted(metas))
            pooled, holders = rng.random() < 0.5, rng.randrange(2)
            updated(metas[pid], (merged, three), pooled, holders)
        elif op < 0.8 and metas:
            pid = rng.choice(sorted(metas))
            removed(metas.pop(pid), (merged, three))
        else:
            same_proposals(merged, three, rng.choice(DECISIONS), step)
    same_order(merged, three)
    assert merged.placed == three.placed and merged.pooled == three.pooled


@pytest.mark.parametrize("seed", range(3))
def test_lru_moves_and_accesses_in_bulk_give_the_order_of_one_at_a_time(seed: int) -> None:
    """A room's moves told at once (``on_move_many``, short and long batches: moved at once in Python, in
    bulk, or buffered behind a long access) and accesses of every size leave LRU's queues, stamps and
    proposals exactly as the same notices told page by page."""
    import random

    rng = random.Random(seed)
    bulk, single = LRUPolicy(), LRUPolicy()
    metas: dict[int, tuple[PageMeta, PageMeta]] = {}
    for step in range(500):
        op = rng.random()
        if op < 0.2 or not metas:
            inserted(metas, (bulk, single), rng.sample(range(900), rng.choice([1, 5, 80])), pooled_every=4,
                     held_every=3)
        elif op < 0.5:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([1, 3, 9, 70, 150])))
            tiers = [rng.choice(["gpu", "host", "disk", "dropped", "offloading"]) for _ in pids]
            changed = [(pid, tier) for pid, tier in zip(pids, tiers, strict=True) if metas[pid][0].tier != tier]
            moved_many([(metas[pid], tier) for pid, tier in changed], bulk, single)
        elif op < 0.6:
            pid = rng.choice(sorted(metas))
            pooled, holders = rng.random() < 0.5, rng.randrange(2)
            updated(metas[pid], (bulk, single), pooled, holders)
        elif op < 0.8:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([2, 12, 40, 100])))
            bulk.on_access_many([metas[p][0] for p in pids], step)
            for p in pids:
                single.on_access(metas[p][1], step)
        elif op < 0.85:
            pid = rng.choice(sorted(metas))
            removed(metas.pop(pid), (bulk, single))
        else:
            same_proposals(bulk, single, rng.choice(DECISIONS), step)
    same_order(bulk, single)
    assert bulk.clock == single.clock  # a touch each, told either way


def test_lru_seals_leave_the_order_an_update_would() -> None:
    """A seal (``on_sealed_many``: only hash, tokens and types changed) is skipped by LRU; the order is the
    one ``on_update_many`` over the same pages gives.  A subclass that reads updates is still told."""
    import random

    rng = random.Random(11)
    sealed, told = LRUPolicy(), LRUPolicy()
    metas: dict[int, tuple[PageMeta, PageMeta]] = {}
    for step in range(400):
        op = rng.random()
        if op < 0.25 or not metas:
            pid = rng.randrange(300)
            if pid not in metas:
                metas[pid] = (PageMeta(pid, 0), PageMeta(pid, 0))
                for meta, pol in zip(metas[pid], (sealed, told), strict=True):
                    meta.pooled = pid % 3 == 0
                    pol.on_insert(meta)
        elif op < 0.45:
            moved(metas[rng.choice(sorted(metas))], (sealed, told), rng.choice(["gpu", "host", "disk"]))
        elif op < 0.6:
            updated(metas[rng.choice(sorted(metas))], (sealed, told), rng.random() < 0.5, rng.randrange(2))
        elif op < 0.85:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([1, 4, 20])))
            for p in pids:
                for meta in metas[p]:
                    meta.hash, meta.tokens = step, 16
            sealed.on_sealed_many([metas[p][0] for p in pids])
            told.on_update_many([metas[p][1] for p in pids])
        else:
            same_proposals(sealed, told, rng.choice(DECISIONS), step)

    class Counting(LRUPolicy):
        def __init__(self) -> None:
            super().__init__()
            self.updates = 0

        def on_update_many(self, metas: Sequence[PageMeta]) -> None:
            self.updates += len(metas)
            super().on_update_many(metas)

    counting = Counting()
    counting.on_insert(PageMeta(1, 0))
    counting.on_sealed_many([PageMeta(1, 0)])
    assert counting.updates == 1


@pytest.mark.parametrize("seed", range(3))
def test_lru_updates_and_stale_moves_in_bulk_give_the_order_of_one_at_a_time(seed: int) -> None:
    """Pool and holder changes told at once (``on_update_many``) and moves of pages whose pool membership
    changed on the way (``on_move_many``), each with and without touches buffered behind a long access,
    leave LRU's queues, stamps, buffers and proposals exactly as the same notices told page by page."""
    import random

    rng = random.Random(seed)
    bulk, single = LRUPolicy(), LRUPolicy()
    metas: dict[int, tuple[PageMeta, PageMeta]] = {}
    for step in range(500):
        op = rng.random()
        if op < 0.15 or not metas:
            inserted(metas, (bulk, single), rng.sample(range(900), rng.choice([1, 5, 80])), pooled_every=4,
                     held_every=3)
        elif op < 0.45:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([1, 4, 8, 30, 120])))
            for pid in pids:
                pooled, holders = rng.random() < 0.5, rng.randrange(2)
                for meta in metas[pid]:
                    meta.pooled, meta.holders = pooled, holders
            bulk.on_update_many([metas[p][0] for p in pids])
            for p in pids:
                single.on_update(metas[p][1])
        elif op < 0.6:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([1, 3, 8, 40])))
            moves = []
            for pid in pids:
                a, b = metas[pid]
                tier = rng.choice([t for t in ("gpu", "host", "disk", "dropped", "offloading") if t != a.tier])
                if rng.random() < 0.3:  # its pool membership changed, not yet told
                    a.pooled = b.pooled = not a.pooled
                moves.append((metas[pid], tier))
            moved_many(moves, bulk, single)
        elif op < 0.8:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([2, 12, 100])))
            for k, pol in enumerate((bulk, single)):  # a long one buffers the touches after it, in both
                pol.on_access_many([metas[p][k] for p in pids], step)
        elif op < 0.85:
            pid = rng.choice(sorted(metas))
            removed(metas.pop(pid), (bulk, single))
        else:
            same_proposals(bulk, single, rng.choice(DECISIONS), step)
        assert bulk.clock == single.clock and bulk.held == single.held, step
    same_order(bulk, single)
    assert bulk.stamp.tobytes() == single.stamp.tobytes()
    assert bulk.pool_stamp.tobytes() == single.pool_stamp.tobytes()


@pytest.mark.parametrize("seed", range(2))
def test_lru_long_moves_in_bulk_give_the_order_of_one_at_a_time(seed: int) -> None:
    """Moves told at once past ``moves_placed`` (the bulk path: stamped and filed with numpy, or buffered
    behind a long access) leave LRU's queues, stamps and proposals exactly as the same moves told page by
    page; so do the placed ones below it (``bulk.moves_placed`` lowered here to reach both with short
    batches)."""
    import random

    rng = random.Random(seed)
    bulk, single = LRUPolicy(), LRUPolicy()
    bulk.moves_placed = 16
    metas: dict[int, tuple[PageMeta, PageMeta]] = {}
    for step in range(400):
        op = rng.random()
        if op < 0.2 or not metas:
            inserted(metas, (bulk, single), rng.sample(range(900), rng.choice([1, 5, 80])), pooled_every=4,
                     held_every=3)
        elif op < 0.55:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([3, 12, 20, 70, 300])))
            tiers = [rng.choice(["gpu", "host", "disk", "dropped", "offloading"]) for _ in pids]
            changed = [(pid, tier) for pid, tier in zip(pids, tiers, strict=True) if metas[pid][0].tier != tier]
            moved_many([(metas[pid], tier) for pid, tier in changed], bulk, single)
        elif op < 0.75:
            pids = rng.sample(sorted(metas), min(len(metas), rng.choice([2, 40, 100])))
            for k, pol in enumerate((bulk, single)):  # a long one buffers the touches after it, in both
                pol.on_access_many([metas[p][k] for p in pids], step)
        elif op < 0.8:
            pid = rng.choice(sorted(metas))
            removed(metas.pop(pid), (bulk, single))
        else:
            same_proposals(bulk, single, rng.choice(DECISIONS), step)
        assert bulk.clock == single.clock, step
    same_order(bulk, single)
    assert bulk.stamp.tobytes() == single.stamp.tobytes()


@pytest.mark.parametrize("seed", range(3))
def test_lru_bulk_paths_past_a_higher_eager_size(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The twin tests above, with ``LRUPolicy.eager`` at 1024 (their batch sizes straddle it): the touches
    of up to 1024 pages moved at once in Python give the same order as one at a time, as the batches
    stamped with numpy and buffered do."""
    monkeypatch.setattr(LRUPolicy, "eager", 1024)
    test_lru_decision_applies_only_its_queues_touches_with_the_same_order(seed)
    test_lru_touches_filed_in_bulk_give_the_order_filed_one_by_one(seed)
    test_lru_write_notices_in_one_call_give_the_order_of_three(seed)
    test_lru_moves_and_accesses_in_bulk_give_the_order_of_one_at_a_time(seed)
    test_lru_updates_and_stale_moves_in_bulk_give_the_order_of_one_at_a_time(seed)
    test_lru_long_moves_in_bulk_give_the_order_of_one_at_a_time(seed % 2)


@pytest.mark.parametrize("seed", range(2))
def test_seam_counts_by_scalar_updates_as_by_vector_writes(tmp_path: Path, seed: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam's notices counted page by page (``seam.FEW`` past every batch) and by vector writes
    (``FEW`` 0) leave the same ``last_use``, ``uses`` and ``holders`` columns, the same policy order and
    the same state, over random writes, lookups, attaches and frees."""
    import random

    from test_runtime_roombatch import Twins, drive, policy_counts

    from morphcache.runtime import seam as seam_module

    monkeypatch.setattr(seam_module, "FEW", seam_module.FEW)  # (put back after the test)

    class Split(Twins):
        """The first manager's notices by vector writes, the second's page by page."""

        def do(self, op: Callable[[CacheManager, int], Any]) -> Any:
            def each(m: CacheManager, i: int) -> Any:
                seam_module.FEW = (0, 1 << 30)[i]
                return op(m, i)
            return super().do(each)

    def columns(m: CacheManager) -> tuple[bytes, ...]:
        cols, pids = m.parts.pages.cols, sorted(m.parts.pages.records)
        return tuple(col[pids].tobytes() for col in (cols.last_use, cols.uses, cols.holders))

    ms = [CacheManager(config=small_config(tmp_path / name, gpu_pages=16, host_pages=6, disk_pages=64,
                                           pool_capacity=12, prefetch_workers=1)) for name in ("vector", "scalar")]
    drive(Split(ms[0], ms[1]), random.Random(seed), 80, policy_counts, columns)
    for m in ms:
        m.check_integrity()
        m.close()
