"""From a lookup answer to a lease: execute the recovery plan the runtime proposes.

::

    lookup(prompt, limit = len - 1)
      Ready(lease)            -> reuse lease.tokens tokens
      Miss                    -> prefill everything
      NeedsRecovery(plan)     -> prefetch  (runtime.recover: copy host/disk -> GPU, checksum, land)
                                 compress  (runtime.recover: compress kernel on pages whose raw exists)
                                 recompute -> not a page-local operation for this model (a page's KV
                                              depends on the whole prefix): lease the last readable
                                              position and prefill the rest of the prompt from there;
                                              the session writes the recomputed pages back (repair.py)
                              -> look up again (at most MAX_ROUNDS times)

    nominal ─────────────────────────────────────────────┐
    effective at lookup ────────────────┐                │
    reused (after prefetch/compress) ───────────┐        │
    tokens    0 ......................... eff ... reused ... nominal ..... prompt end
              [ leased, read in place             ][ prefilled by the forward         ]
                                                    ^^^^^^^^^^^^^^^^ recomputed tokens
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from morphcache.runtime import CacheManager, Lease, MetricsSnapshot, NeedsRecovery, Ready, RecoveryPlan

MAX_ROUNDS = 4
RUNTIME_PATHS = ("prefetch", "compress")


@dataclass(frozen=True)
class HitOutcome:
    """What the lookup of one prompt gave and what recovery it took.

    ``paths`` counts executed (page, object) assignments by recovery path; ``recompute`` ones were
    executed by prefilling from the leased position.
    """

    lease: Lease | None
    nominal: int
    effective: int
    reused: int
    gap_by_object: Mapping[str, int]
    paths: Mapping[str, int]
    prefetched_bytes: int
    prefetched_pages: int
    corrupt_pages: int
    lookups: int
    recompute_plan: RecoveryPlan | None = None


def _delta(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def _moved_in(m: MetricsSnapshot) -> int:
    return sum(v for k, v in m.bytes_moved.items() if k.endswith("->gpu"))


def resolve_hit(manager: CacheManager, tokens: Sequence[int], limit: int, owner: str) -> HitOutcome:
    """Look up ``tokens`` (hit at most ``limit`` tokens), carry out the plan, return the lease.

    State: runtime lookups (LRU touches, metrics), prefetches and compressions of the plan's pages,
    and, when a lease is returned, the pins it holds (the caller releases it).
    """
    before = manager.metrics()
    result = manager.lookup(tokens, limit=limit, owner=owner)
    first = manager.metrics()
    if isinstance(result, Ready):
        nominal, effective = result.nominal, result.lease.tokens
    elif isinstance(result, NeedsRecovery):
        nominal, effective = result.plan.nominal, result.plan.effective
    else:
        nominal, effective = result.nominal, result.effective
    paths: Counter[str] = Counter()
    lookups = 1
    rounds = 0
    recompute: RecoveryPlan | None = None
    while isinstance(result, NeedsRecovery):
        plan = result.plan
        runnable = tuple(a for a in plan.assignments if a.path in RUNTIME_PATHS)
        rounds += 1
        if runnable and rounds < MAX_ROUNDS:
            report = manager.recover(dataclasses.replace(plan, assignments=runnable))
            paths.update({k: v for k, v in report.done.items() if k in RUNTIME_PATHS})
            result = manager.lookup(tokens, limit=limit, owner=owner)
        else:
            recompute = _only(plan, "recompute")
            paths["recompute"] += len(recompute.assignments)
            if not plan.effective or rounds > MAX_ROUNDS:
                break
            result = manager.lookup(tokens, limit=plan.effective, owner=owner)
        lookups += 1
    lease = result.lease if isinstance(result, Ready) else None
    last = manager.metrics()
    return HitOutcome(
        lease=lease,
        nominal=nominal,
        effective=effective,
        reused=lease.tokens if lease is not None else 0,
        gap_by_object=_delta(first.gap_tokens_by_object, before.gap_tokens_by_object),
        paths=dict(paths),
        prefetched_bytes=_moved_in(last) - _moved_in(before),
        prefetched_pages=sum(_delta(last.events_fired, first.events_fired).get(e, 0) for e in ("land",)),
        corrupt_pages=sum(_delta(last.corrupt_pages, first.corrupt_pages).values()),
        lookups=lookups,
        recompute_plan=recompute if recompute is not None and recompute.assignments else None,
    )


def _only(plan: RecoveryPlan, path: str) -> RecoveryPlan:
    """The plan restricted to the assignments on ``path``."""
    return dataclasses.replace(plan, assignments=tuple(a for a in plan.assignments if a.path == path))
