"""Eviction policies side by side: typed workloads replayed through the CacheManager control plane.

(a) every typed workload (chat, reasoning, agentic, templated, mixed, shifting) at three memory
    sizes, each policy in the same run: effective hit rate, prefill and recomputed tokens, KV bytes
    brought back from the host, and a TTFT model (policies/cost.py: prefill seconds per token by
    position plus transfer seconds per byte; the constants and their sources are stated there);
    and the same replay with no eviction at all, the bound on what any policy can gain;
(b) the shifting workload against an oracle of fixed-parameter policies: a grid of semantic weight
    vectors, each replayed, the best one picked per phase after the fact;
(c) the Mooncake conversation trace (untyped): the same table, replay throughput per policy
    relative to LRU, and each policy's own cost per notification and per decision, measured by
    replaying the recorded notification stream into the policy alone.

Memory sizes are fractions of a workload's footprint (distinct full pages it writes): GPU pages =
2%, 5% and 10% of it (at least its largest request plus 16 pages), host pages = half as many,
reuse pool = GPU + host; no disk tier.  A size within 20% of the previous one is skipped.  Targets (not tests):
SAECache >= 1.4x LRU and better than the FLOP-aware policy on TTFT on typed mixed workloads under
pressure; on the shifting workload within 10% of the per-phase oracle; never more than 5% worse than
LRU anywhere; >= 90% of LRU's replay throughput on the trace.

Usage: ``python benchmarks/bench_eviction.py [--only a,b,c] [--workloads ...] [--policies ...]
[--trace PATH] [--trace-limit N] [--json FILE]``

The replay goes through the runtime itself: ``RuntimeConfig(policy=...)``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench_runtime import find_trace, machine

from morphcache.policies import DEFAULT_COST, CostModel, FlopAwarePolicy, SAECachePolicy, SemanticPolicy
from morphcache.runtime import CacheManager, MorphcacheError, NeedsRecovery, Ready, RuntimeConfig
from morphcache.runtime.policy import EvictionPolicy, LRUPolicy
from morphcache.workloads import (
    TypedWorkload,
    agentic,
    multi_turn_chat,
    reasoning_chat,
    shifting_mixture,
    templated,
    trace_workload,
    typed_mixture,
)

PAGE = 16

WORKLOADS: dict[str, Callable[[], TypedWorkload]] = {
    "chat": lambda: multi_turn_chat(0),
    "reasoning": lambda: reasoning_chat(0),
    "agentic": lambda: agentic(0),
    "templated": lambda: templated(0),
    "mixed": lambda: typed_mixture(0),
    "shifting": lambda: shifting_mixture(0),
}
POLICIES: dict[str, Callable[[TypedWorkload], EvictionPolicy]] = {
    "lru": lambda w: LRUPolicy(),
    "flop": lambda w: FlopAwarePolicy(token_scale=w.token_scale),
    "semantic": lambda w: SemanticPolicy(),
    "saecache": lambda w: SAECachePolicy(),
}
FRACTIONS = (0.02, 0.05, 0.10)


@dataclass
class RunResult:
    """One workload replayed with one policy at one size."""

    workload: str
    policy: str
    gpu_pages: int
    host_pages: int
    requests: int
    prompt_tokens: int  # real tokens
    served_tokens: int
    prefill_tokens: int
    recompute_tokens: int
    host_bytes: int  # real KV bytes brought back from the host tier
    ttft_s: float  # sum over requests
    wall_s: float
    refusals: int
    phase_ttft: list[float] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        return self.served_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def mean_ttft_ms(self) -> float:
        return 1e3 * self.ttft_s / self.requests if self.requests else 0.0


def footprint(work: TypedWorkload) -> tuple[int, int]:
    """(distinct full pages the workload writes, pages of its largest request)."""
    seen: set[int] = set()
    largest = 0
    for req in work.requests:
        full = req.tokens + req.output
        largest = max(largest, -(-len(full) // PAGE))
        h = 0
        for p in range(len(full) // PAGE):
            h = hash((h, full[p * PAGE:(p + 1) * PAGE]))
            seen.add(h)
    return len(seen), largest


def sizes(work: TypedWorkload, fractions: tuple[float, ...] = FRACTIONS) -> list[tuple[int, int]]:
    """(GPU pages, host pages) per memory size (one within 20% of the previous is skipped)."""
    pages, largest = footprint(work)
    out: list[tuple[int, int]] = []
    for f in fractions:
        gpu = max(math.ceil(f * pages), largest + 16)
        if not out or gpu > 1.2 * out[-1][0]:
            out.append((gpu, gpu // 2))
    return out


def make_manager(gpu: int, host: int, policy: EvictionPolicy) -> CacheManager:
    """A manager on the benchmark's configuration with ``policy`` choosing its victims."""
    opts: dict[str, Any] = dict(page_size=PAGE, window=2 * PAGE, gpu_pages=gpu, host_pages=host,
                                pool_capacity=gpu + host, prefetch_workers=1)
    return CacheManager(config=RuntimeConfig(**opts, policy=policy))


def refusals_of(m: CacheManager) -> int:
    return m.metrics().policy_refusals


def replay(work: TypedWorkload, policy_name: str, gpu: int, host: int, cost: CostModel = DEFAULT_COST,
           policy: EvictionPolicy | None = None) -> RunResult:
    """Replay ``work`` with one policy; the TTFT model charges each request's prefill and fetches."""
    pol = policy if policy is not None else POLICIES[policy_name](work)
    s = work.token_scale
    phases = list(work.phases) or [0]
    phase_ttft = [0.0] * len(phases)
    res = RunResult(work.name, policy_name, gpu, host, len(work.requests), 0, 0, 0, 0, 0, 0.0, 0.0, 0)
    t0 = time.perf_counter()
    with make_manager(gpu, host, pol) as m:
        moved = 0
        for req in work.requests:
            sid = req.request_id
            m.register(sid, session=req.session, task=req.task)  # type: ignore[call-arg]
            result = m.lookup(req.tokens, owner=sid)
            recompute_s = 0.0
            recomputed = 0
            if isinstance(result, NeedsRecovery):
                plan = result.plan
                try:
                    m.recover(plan)
                    for b in sorted({a.block for a in plan.assignments if a.path == "recompute"}):
                        lo, hi = b * PAGE, min((b + 1) * PAGE, plan.target)
                        recompute_s += cost.prefill_seconds(lo * s, hi * s)
                        recomputed += hi - lo
                except MorphcacheError:
                    pass
                result = m.lookup(req.tokens, owner=sid)
                if isinstance(result, NeedsRecovery):
                    result = m.lookup(req.tokens, limit=result.plan.effective, owner=sid)
            served = 0
            if isinstance(result, Ready):
                served = result.lease.tokens
                m.attach(sid, result.lease, types=req.types_between(0, served))
                m.release(result.lease)
            n = len(req.tokens)
            m.append(sid, req.tokens[served:], types=req.types_between(served, n))  # type: ignore[call-arg]
            if req.output:
                m.append(sid, req.output, types=req.output_spans)  # type: ignore[call-arg]
            m.free(sid)
            now_moved = m.metrics().bytes_moved.get("host->gpu", 0)
            pages_back = (now_moved - moved) // max(1, m.page_bytes)
            moved = now_moved
            kv_bytes = pages_back * PAGE * s * cost.kv_bytes_per_token
            ttft = cost.prefill_seconds(served * s, n * s) + recompute_s + cost.bytes_seconds(kv_bytes, "host")
            res.prompt_tokens += n * s
            res.served_tokens += served * s
            res.prefill_tokens += (n - served) * s
            res.recompute_tokens += recomputed * s
            res.host_bytes += kv_bytes
            res.ttft_s += ttft
            phase = max(i for i, start in enumerate(phases) if req.order >= start)
            phase_ttft[phase] += ttft
        res.refusals = refusals_of(m)
    res.wall_s = time.perf_counter() - t0
    res.phase_ttft = phase_ttft
    res.stats = pol.stats()
    return res


def print_rows(rows: list[RunResult]) -> None:
    base = {(r.workload, r.gpu_pages): r for r in rows if r.policy == "lru"}
    print(f"  {'GPU/host pages':>15} {'policy':>9} {'eff hit':>8} {'prefill Mtok':>13} {'recomp Ktok':>12} "
          f"{'host GB':>8} {'TTFT ms':>8} {'vs LRU':>7} {'req/s':>7} {'refused':>8}")
    for r in rows:
        lru = base.get((r.workload, r.gpu_pages))
        speed = f"{lru.ttft_s / r.ttft_s:6.2f}x" if lru and r.ttft_s else "      -"
        print(f"  {r.gpu_pages:>7}/{r.host_pages:<7} {r.policy:>9} {r.hit_rate:8.3f} {r.prefill_tokens / 1e6:13.2f} "
              f"{r.recompute_tokens / 1e3:12.1f} {r.host_bytes / 1e9:8.2f} {r.mean_ttft_ms:8.1f} {speed} "
              f"{r.requests / r.wall_s:7.0f} {r.refusals:8}")


# -- (a) typed workloads -------------------------------------------------------------------------------
def bench_typed(names: list[str], policies: list[str], out: list[RunResult]) -> None:
    print("\n(a) typed workloads, each policy at each size (TTFT: mean per request under the cost model)")
    for name in names:
        work = WORKLOADS[name]()
        pages, largest = footprint(work)
        print(f"\n{name}: {len(work.requests)} requests, {work.token_scale} real tokens per token, footprint "
              f"{pages} pages of {PAGE} tokens, largest request {largest} pages")
        rows = []
        for gpu, host in sizes(work):
            for pol in policies:
                rows.append(replay(work, pol, gpu, host))
        print_rows(rows)
        bound = replay(work, "lru", pages + largest, pages + largest)
        print(f"  no eviction at all (GPU and host hold the whole footprint): eff hit {bound.hit_rate:.3f}, "
              f"TTFT {bound.mean_ttft_ms:.1f} ms, the bound on any policy's gain")
        out.extend(rows)


# -- (b) shifting workload vs per-phase oracle ---------------------------------------------------------
def fixed_grid() -> list[dict[str, float]]:
    """Semantic weight vectors the oracle chooses from (system 1, document 0.5, reasoning 0)."""
    grid = []
    for response in (0.0, 0.5, 1.0):
        for tool in (0.0, 0.5, 1.0):
            for user in (0.5, 1.0):
                grid.append({"system": 1.0, "document": 0.5, "reasoning": 0.0, "user": user, "response": response,
                             "tool": tool})
    return grid


def bench_oracle(out: list[RunResult], fraction: float = FRACTIONS[1]) -> None:
    work = WORKLOADS["shifting"]()
    (gpu, host), = sizes(work, (fraction,))
    print(f"\n(b) shifting workload at GPU/host {gpu}/{host} pages: SAECache vs the best fixed weights per phase")
    sae = replay(work, "saecache", gpu, host)
    lru = replay(work, "lru", gpu, host)
    best = [math.inf] * len(sae.phase_ttft)
    pick: list[dict[str, float]] = [{}] * len(best)
    for weights in fixed_grid():
        r = replay(work, "semantic", gpu, host, policy=SemanticPolicy(weights))
        for i, t in enumerate(r.phase_ttft):
            if t < best[i]:
                best[i], pick[i] = t, weights
    oracle = sum(best)
    for i, (t, w) in enumerate(zip(best, pick, strict=True)):
        print(f"  phase {i + 1}: oracle TTFT {t:.2f} s over the phase, weights response {w['response']} "
              f"tool {w['tool']} user {w['user']}; SAECache {sae.phase_ttft[i]:.2f} s; LRU {lru.phase_ttft[i]:.2f} s")
    print(f"  whole run: SAECache / oracle = {sae.ttft_s / oracle:.3f} (target <= 1.10), "
          f"LRU / oracle = {lru.ttft_s / oracle:.3f}")
    out.extend([sae, lru])


# -- (c) trace, throughput and policy cost -------------------------------------------------------------
class Recorder(EvictionPolicy):
    """Forwards to ``inner`` and records every call, to replay into other policies alone."""

    def __init__(self, inner: EvictionPolicy) -> None:
        self.inner = inner
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.name = inner.name

    def _copy(self, meta: Any) -> Any:
        return meta

    def on_insert(self, meta: Any) -> None:
        self.calls.append(("on_insert", (meta.page, _snap(meta))))
        self.inner.on_insert(meta)

    def on_access(self, meta: Any, now: int) -> None:
        self.calls.append(("on_access", (meta.page, _snap(meta), now)))
        self.inner.on_access(meta, now)

    def on_update(self, meta: Any) -> None:
        self.calls.append(("on_update", (meta.page, _snap(meta))))
        self.inner.on_update(meta)

    def on_move(self, meta: Any, old_tier: str) -> None:
        self.calls.append(("on_move", (meta.page, _snap(meta), old_tier)))
        self.inner.on_move(meta, old_tier)

    def on_remove(self, meta: Any) -> None:
        self.calls.append(("on_remove", (meta.page, _snap(meta))))
        self.inner.on_remove(meta)

    def on_refused(self, decision: str, page: int, reason: str) -> None:
        self.calls.append(("on_refused", (decision, page, reason)))
        self.inner.on_refused(decision, page, reason)

    def propose(self, decision: str) -> Any:
        self.calls.append(("propose", (decision,)))
        return self.inner.propose(decision)

    def stats(self) -> dict[str, float]:
        return self.inner.stats()


_FIELDS = ("depth", "tokens", "types", "session", "task", "writer", "created", "last_use", "uses", "tier", "bytes",
           "recovery_tokens", "pooled", "holders", "hash")


def _snap(meta: Any) -> tuple[Any, ...]:
    return tuple(getattr(meta, f) for f in _FIELDS)


def policy_cost(calls: list[tuple[str, tuple[Any, ...]]], policy: EvictionPolicy) -> tuple[float, float, int]:
    """(seconds in notifications, seconds in proposals, decisions) replaying ``calls`` into ``policy``:
    each decision takes the first proposal that still names a known page."""
    from morphcache.runtime.policy import PageMeta

    metas: dict[int, PageMeta] = {}
    t_note = t_prop = 0.0
    decisions = 0
    perf = time.perf_counter
    for name, args in calls:
        if name == "propose":
            t0 = perf()
            gen = policy.propose(args[0])
            next(gen, None)
            gen.close()  # type: ignore[attr-defined]
            t_prop += perf() - t0
            decisions += 1
            continue
        if name == "on_refused":
            t0 = perf()
            policy.on_refused(*args)
            t_note += perf() - t0
            continue
        pid, snap = args[0], args[1]
        meta = metas.get(pid)
        if meta is None or name == "on_insert":
            meta = metas[pid] = PageMeta(pid, snap[0])
        for f, v in zip(_FIELDS, snap, strict=True):
            setattr(meta, f, v)
        t0 = perf()
        if name == "on_access":
            policy.on_access(meta, args[2])
        elif name == "on_move":
            policy.on_move(meta, args[2])
        else:
            getattr(policy, name)(meta)
        t_note += perf() - t0
        if name == "on_remove":
            metas.pop(pid, None)
    return t_note, t_prop, decisions


def bench_trace(path: Path, limit: int | None, policies: list[str], out: list[RunResult]) -> None:
    work = trace_workload(path, block_tokens=PAGE, limit=limit)
    pages, largest = footprint(work)
    gpu, host = max(4096, 2 * largest), max(4096, 2 * largest)
    print(f"\n(c) Mooncake trace: {len(work.requests)} requests (untyped, conversations inferred), footprint {pages} "
          f"pages, GPU/host {gpu}/{host} pages")
    rows = [replay(work, pol, gpu, host) for pol in policies]
    recorded = None
    if "lru" in policies:  # recorded apart: the recorder's own cost must not slow LRU's throughput row
        rec = Recorder(LRUPolicy())
        replay(work, "lru", gpu, host, policy=rec)
        recorded = rec.calls
    print_rows(rows)
    lru = next((r for r in rows if r.policy == "lru"), None)
    if lru is not None:
        for r in rows:
            print(f"  {r.policy:>9}: replay throughput {r.requests / r.wall_s:6.0f} req/s = "
                  f"{(r.requests / r.wall_s) / (lru.requests / lru.wall_s):.2f} of LRU's (target >= 0.90)")
    if recorded:
        n_notes = sum(1 for c in recorded if c[0] not in ("propose",))
        print(f"  policy cost alone, replaying LRU's recorded stream ({n_notes} notifications, "
              f"{sum(1 for c in recorded if c[0] == 'propose')} decisions):")
        for pol in policies:
            t_note, t_prop, decisions = policy_cost(recorded, POLICIES[pol](work))
            print(f"  {pol:>9}: {1e6 * t_note / max(1, n_notes):6.2f} us per notification, "
                  f"{1e6 * t_prop / max(1, decisions):6.2f} us per decision, {t_note + t_prop:6.2f} s in all "
                  f"({100 * (t_note + t_prop) / lru.wall_s if lru else 0:.1f}% of LRU's replay time)")
    out.extend(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="a,b,c", help="which parts to run (a, b, c)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="typed workloads for (a)")
    ap.add_argument("--policies", default=",".join(POLICIES), help="policies to compare")
    ap.add_argument("--trace", default=None, help="path of the Mooncake-format trace")
    ap.add_argument("--trace-limit", type=int, default=None, help="replay at most this many trace requests")
    ap.add_argument("--json", default=None, help="write every result row to this file")
    args = ap.parse_args(argv)
    parts = set(args.only.split(","))
    policies = args.policies.split(",")
    print(f"morphcache eviction benchmark on {machine()}")
    print(f"replay through the runtime (RuntimeConfig.policy); cost model: {DEFAULT_COST}")
    rows: list[RunResult] = []
    if "a" in parts:
        bench_typed(args.workloads.split(","), policies, rows)
    if "b" in parts:
        bench_oracle(rows)
    if "c" in parts:
        path = find_trace(args.trace)
        if path is None:
            print("\n(c) skipped: trace not found (pass --trace)")
        else:
            bench_trace(path, args.trace_limit, policies, rows)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1), encoding="utf-8")


if __name__ == "__main__":
    sys.setrecursionlimit(10_000)
    main()
