"""Write-back of the recompute path: cached pages the plan sent to ``recompute`` get the KV that the
request's own prefill just computed for the same tokens.

A page's KV depends on its whole prefix, so the engine recomputes by prefilling from the last
readable position.  Afterwards its sequence holds, block for block, pages with the same tokens and
the same prefix as the stale cached ones; those are copied back so the next request sharing the
prefix reuses them instead of recomputing again::

    cached chain     [ p0 ][ p1 ][ p2: dropped / window expired ][ p3 ] ...
    this sequence    [ p0 ][ p1 ][ q2: prefilled now            ] ...
    write-back       runtime recover(recompute p2): fresh slot, new generation, compressed, pooled
                     store.copy_pages(q2 -> p2): raw, compressed and indexer KV of every layer

Only whole pages whose tokens equal the sequence's tokens at that block are written back (a partly
matched page continues differently).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from morphcache.engine.store import TensorPageStore
from morphcache.runtime import CacheManager, MorphcacheError, RecoveryPlan


def write_back(manager: CacheManager, store: TensorPageStore, plan: RecoveryPlan, own_pages: Sequence[int],
               tokens: Sequence[int]) -> int:
    """Recompute the plan's pages from ``own_pages`` (this sequence's pages, block order, whose
    ``tokens`` it computed); returns how many cached pages were rebuilt.

    State: for each eligible page, the runtime's recompute path (drop if needed, fresh GPU slot,
    generation bump, compress, index, admit) and a copy of the matching own page's payload into it.
    """
    c = manager.C
    eligible = []
    for a in plan.assignments:
        b = a.block
        if b >= len(own_pages) or (b + 1) * c > len(tokens) or own_pages[b] == a.page:
            continue
        try:
            st = manager.page_state(a.page)
            own = manager.page_state(own_pages[b])
        except MorphcacheError:
            continue
        if st["tokens"] != tuple(tokens[b * c:(b + 1) * c]) or own["tier"] != "gpu" or \
                own["compressed"] != "complete" or st["pin"]:
            continue
        eligible.append(a)
    if not eligible:
        return 0
    report = manager.recover(dataclasses.replace(plan, assignments=tuple(eligible)))
    failed = {pid for pid, _ in report.failed}
    rebuilt = 0
    for a in {a.page: a for a in eligible}.values():
        if a.page in failed:
            continue
        st = manager.page_state(a.page)
        if st["tier"] != "gpu":
            continue
        src = int(manager.page_state(own_pages[a.block])["gpu_slot"])
        store.copy_pages([src], [int(st["gpu_slot"])])
        rebuilt += 1
    return rebuilt
