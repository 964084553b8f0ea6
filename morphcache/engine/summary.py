"""The simulate report: per-request counters and the runtime's metrics, summed into one frozen value,
rendered as text (rich) or JSON.

Rates are token-weighted over the prompts of the workload::

    nominal hit rate     sum(nominal)   / sum(prompt tokens)    what a hash-only cache would claim
    effective hit rate   sum(effective) / sum(prompt tokens)    readable at lookup, no recovery
    reuse after recovery sum(reused)    / sum(prompt tokens)    read from the cache in the end
    gap by object        nominal - effective, charged to each object blocking the nominal position

The eviction policy's figures: ``evictions`` (its victims the runtime accepted, by decision: the
GPU, the host or disk tier, the reuse pool), ``policy_refusals`` (its proposals the spec's guard or
the runtime refused: pinned, being written, in flight, protected, not in the tier) and what it learned or
counted (``policy_stats``).

Requests served on an approximate linear-layer state (opt-in Tail-Replay) are kept apart: the golden
comparison (``sampled``, ``max_abs_diff``, ``drifted``, ``within_tolerance``) covers the exact
requests only, and each approximate request is listed with its own divergence
(``approximate``), never folded into the exact figures.  How many requests opted in, how many tail
replays ran and how many tokens they replayed are the runtime's counters (``runtime_state``: spec
``opt_in`` and ``replay_tail``, from ``CacheManager.metrics().state``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from morphcache.engine.config import model_name
from morphcache.engine.engine import Engine
from morphcache.engine.replay import ReplayResult
from morphcache.engine.report import RequestReport
from morphcache.runtime import StateMetricsSnapshot
from morphcache.runtime.policy import DECISIONS

TOLERANCE = 1e-4
TIER_EVENTS = ("offload", "spill", "prefetch", "land", "corrupt", "drop", "recompute", "evict", "slide")


@dataclass(frozen=True)
class ApproximateRequest:
    """One request served on an approximate state: its hit, the tokens replayed (R), its budget, and
    its measured divergence from the golden forward."""

    request_id: str
    hit: int
    replayed: int
    budget: float
    max_abs_diff: float
    top1_agreement: float
    withdrawn_pages: int


@dataclass(frozen=True)
class SimSummary:
    """Everything the simulate command reports (see the module docstring for the rates)."""

    workload: str
    mode: str
    ops: str
    requests: int
    prompt_tokens: int
    decoded_tokens: int
    computed_tokens: int
    nominal_tokens: int
    effective_tokens: int
    reused_tokens: int
    recomputed_tokens: int
    gap_by_object: Mapping[str, int]
    recoveries_by_path: Mapping[str, int]
    rebuilt_pages: int
    prefetched_bytes: int
    prefetched_pages: int
    corrupt_pages: int
    sampled: int
    max_abs_diff: float | None
    drifted: int
    tolerance: float
    tier_events: Mapping[str, int]
    bytes_moved: Mapping[str, int]
    pools: Mapping[str, int]
    integrity_checks: int
    wall_s: float
    refused: tuple[str, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)
    model: str = "hybrid"
    n_layers: int = 6
    linear_layers: int = 0
    rebuild_token_layers: int = 0
    state_paths: Mapping[str, int] = field(default_factory=dict)
    linear_tokens: int = 0
    linear_token_layers: int = 0
    tail_replay: float | None = None
    approximate: tuple[ApproximateRequest, ...] = field(default_factory=tuple)
    checkpoint_tokens: int = 0
    """Hit tokens exact requests did not run through the linear layers: they started from a checkpoint."""
    policy: str = "lru"
    evictions: Mapping[str, int] = field(default_factory=dict)
    policy_refusals: int = 0
    policy_stats: Mapping[str, float] = field(default_factory=dict)
    runtime_state: Mapping[str, float] = field(default_factory=dict)
    """The runtime's recurrent-state counters (opt_ins, replays, replayed_tokens, approximate_tokens,
    approximate_effective_hit_rate, exact_effective_hit_rate); empty without recurrent state."""

    @property
    def nominal_hit_rate(self) -> float:
        return self.nominal_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def effective_hit_rate(self) -> float:
        return self.effective_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def reuse_rate(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def evicted(self) -> int:
        """The policy's accepted victims, every decision together."""
        return sum(self.evictions.values())

    @property
    def gap_tokens(self) -> int:
        return self.nominal_tokens - self.effective_tokens

    @property
    def within_tolerance(self) -> bool:
        """Every sampled exact request matched the golden forward within the tolerance."""
        return self.drifted == 0

    @property
    def token_layers_saved(self) -> int:
        """Token-layers (one token through one layer) not computed thanks to the cache: the reused
        tokens through every layer, less the state rebuilds (linear layers recomputed over hits)."""
        return self.reused_tokens * self.n_layers - self.rebuild_token_layers

    @property
    def approximate_reused_tokens(self) -> int:
        """Reused tokens of the requests served on an approximate state."""
        return sum(a.hit for a in self.approximate)

    @property
    def replayed_tokens(self) -> int:
        """Tokens the approximate requests replayed: the runtime's count (spec ``replayed[r]`` of every
        ``replay_tail``), or the requests' own sum without recurrent state in the runtime."""
        if "replayed_tokens" in self.runtime_state:
            return int(self.runtime_state["replayed_tokens"])
        return sum(a.replayed for a in self.approximate)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the rates included)."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        out["refused"] = list(self.refused)
        out["approximate"] = [asdict(a) for a in self.approximate]
        out.update(nominal_hit_rate=self.nominal_hit_rate, effective_hit_rate=self.effective_hit_rate,
                   reuse_rate=self.reuse_rate, gap_tokens=self.gap_tokens,
                   within_tolerance=self.within_tolerance,
                   approximate_reused_tokens=self.approximate_reused_tokens, replayed_tokens=self.replayed_tokens,
                   token_layers_saved=self.token_layers_saved, evicted=self.evicted)
        return out


def _approximate(reps: tuple[RequestReport, ...]) -> tuple[ApproximateRequest, ...]:
    out = []
    for r in reps:
        if r.exact:
            continue
        assert r.max_abs_diff is not None and r.top1_agreement is not None, "approximate requests are measured"
        out.append(ApproximateRequest(r.request_id, r.reused, r.linear_tokens, r.replay_budget or 0.0,
                                      r.max_abs_diff, r.top1_agreement, r.withdrawn_pages))
    return tuple(out)


def _mode(engine: Engine) -> str:
    if not engine.config.unsafe:
        return "guarded"
    trusted = ", recurrent state trusted as found" if engine.model.config.linear_layers else ""
    return f"unsafe (hash-only hits, no validation, guard off{trusted})"


def summarize(engine: Engine, run: ReplayResult, workload: str, tolerance: float = TOLERANCE,
              notes: tuple[str, ...] = (), tail_replay: float | None = None) -> SimSummary:
    """Sum the run's request reports and read the runtime's tier counters."""
    reps = run.reports
    gap: Counter[str] = Counter()
    paths: Counter[str] = Counter()
    states: Counter[str] = Counter()
    for r in reps:
        gap.update(r.gap_by_object)
        paths.update(r.recoveries)
        states[r.state_path] += 1
    diffs = [r.max_abs_diff for r in reps if r.max_abs_diff is not None and r.exact]
    exact = [r for r in reps if r.exact]
    m = engine.manager.metrics()
    cfg = engine.config
    return SimSummary(
        workload=workload,
        mode=_mode(engine),
        ops=engine.ops.name,
        requests=len(reps),
        prompt_tokens=sum(r.prompt_tokens for r in reps),
        decoded_tokens=sum(r.decoded for r in reps),
        computed_tokens=sum(r.computed for r in reps),
        nominal_tokens=sum(r.nominal for r in reps),
        effective_tokens=sum(r.effective for r in reps),
        reused_tokens=sum(r.reused for r in reps),
        recomputed_tokens=sum(r.recomputed for r in reps),
        gap_by_object=dict(sorted(gap.items())),
        recoveries_by_path=dict(sorted(paths.items())),
        rebuilt_pages=sum(r.rebuilt_pages for r in reps),
        prefetched_bytes=sum(r.prefetched_bytes for r in reps),
        prefetched_pages=sum(r.prefetched_pages for r in reps),
        corrupt_pages=sum(r.corrupt_pages for r in reps),
        sampled=len(diffs),
        max_abs_diff=max(diffs) if diffs else None,
        drifted=sum(1 for d in diffs if not d <= tolerance),
        tolerance=tolerance,
        tier_events={e: int(m.events_fired.get(e, 0)) for e in TIER_EVENTS},
        bytes_moved=dict(sorted(m.bytes_moved.items())),
        pools={"gpu_pages": cfg.gpu_pages, "host_pages": cfg.host_pages, "disk_pages": cfg.disk_pages,
               "page_bytes": engine.pools.page_bytes, "state_bytes": engine.states.state_bytes,
               "state_pool_bytes": engine.states.nbytes},
        integrity_checks=run.integrity_checks,
        wall_s=run.wall_s,
        refused=run.refused,
        notes=notes,
        model=model_name(cfg.model) or "custom",
        n_layers=cfg.model.n_layers,
        linear_layers=len(cfg.model.linear_layers),
        rebuild_token_layers=sum(r.linear_token_layers for r in reps),
        state_paths=dict(sorted(states.items())),
        linear_tokens=sum(r.linear_tokens for r in exact),
        linear_token_layers=sum(r.linear_token_layers for r in exact),
        tail_replay=tail_replay,
        approximate=_approximate(reps),
        checkpoint_tokens=sum(r.checkpoint_tokens for r in exact),
        policy=cfg.policy,
        evictions={d: int(m.policy_victims.get(d, 0)) for d in DECISIONS},
        policy_refusals=m.policy_refusals,
        policy_stats={k: float(v) for k, v in sorted(engine.policy.stats().items()) if math.isfinite(v)},
        runtime_state=_runtime_state(m.state),
    )


def _runtime_state(snap: StateMetricsSnapshot | None) -> dict[str, float]:
    if snap is None:
        return {}
    return {"opt_ins": snap.opt_ins, "replays": snap.replays, "replayed_tokens": snap.replayed_tokens,
            "approximate_tokens": snap.approximate_tokens,
            "approximate_effective_hit_rate": snap.approximate_effective_hit_rate,
            "exact_effective_hit_rate": snap.exact_effective_hit_rate}
