"""A standalone policy simulator for the policy tests: one tier of fixed capacity fed by a workload.

Pages are the full pages of each request's prompt + output, keyed by chain hash.  A request hits
the longest run of its prompt's pages present in the tier (each hit is an access), then writes the
rest; a write into a full tier asks the policy for a victim (the request's own pages are refused
as protected) and drops it::

    request   [hit][hit][hit][new][new][new]      new pages: insert (evicting first if full)
    after     the request's pages are released (holders 0)

No runtime, no spec: only the notifications a policy sees and the victims it picks.
"""

from __future__ import annotations

from dataclasses import dataclass

from morphcache.runtime.policy import EvictionPolicy, PageMeta
from morphcache.workloads import TypedWorkload


@dataclass(frozen=True)
class SimResult:
    """Prompt tokens served from the tier, prompt tokens requested, evictions."""

    hit_tokens: int
    prompt_tokens: int
    evictions: int

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def _types_of(spans: tuple[tuple[int, int, str], ...], start: int, end: int) -> frozenset[str]:
    return frozenset(name for s, e, name in spans if s < end and e > start)


def simulate(policy: EvictionPolicy, work: TypedWorkload, capacity: int, page_size: int = 16) -> SimResult:
    """Replay ``work`` through one tier of ``capacity`` pages managed by ``policy``."""
    cache: dict[int, PageMeta] = {}
    by_pid: dict[int, PageMeta] = {}
    next_pid = 0
    now = 0
    hits = total = evictions = 0
    for req in work.requests:
        full = req.tokens + req.output
        spans = req.spans + tuple((s + len(req.tokens), e + len(req.tokens), n) for s, e, n in req.output_spans)
        h = 0
        mine: list[PageMeta] = []
        missed = False
        for p in range(len(full) // page_size):
            start, end = p * page_size, (p + 1) * page_size
            h = hash((h, full[start:end]))
            meta = cache.get(h)
            if meta is not None and not missed:
                now += 1
                meta.last_use, meta.uses = now, meta.uses + 1
                policy.on_access(meta, now)  # the lookup, then the request takes the page
                meta.holders += 1
                policy.on_update(meta)
                if end <= len(req.tokens):
                    hits += page_size
                mine.append(meta)
                continue
            missed = True
            if meta is not None:  # the page outlived its evicted parent: present, but not a prefix hit
                meta.holders += 1
                policy.on_update(meta)
                mine.append(meta)
                continue
            while len(cache) >= capacity:
                victim = next((v for v in policy.propose("gpu")
                               if by_pid[v] not in mine or policy.on_refused("gpu", v, "protected")), None)
                if victim is None:
                    raise RuntimeError("the policy proposed no evictable page")
                old = by_pid.pop(victim)
                del cache[old.hash]  # type: ignore[arg-type]
                old.tier = "dropped"
                policy.on_move(old, "gpu")
                policy.on_remove(old)
                evictions += 1
            now += 1
            meta = PageMeta(next_pid, p, tokens=page_size, types=_types_of(spans, start, end), session=req.session,
                            task=req.task, writer=req.request_id, created=now, bytes=page_size * 8,
                            recovery_tokens=page_size)
            meta.hash, meta.holders, meta.uses = h, 1, 1
            next_pid += 1
            cache[h] = by_pid[meta.page] = meta
            policy.on_insert(meta)
            mine.append(meta)
        total += len(req.tokens)
        for meta in mine:
            meta.holders -= 1
            policy.on_update(meta)
    return SimResult(hits, total, evictions)
