"""Helpers of the engine tests: engines on small pools, a scripted random workload with tier chaos,
and the differential check against the golden forward."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from morphcache.engine import Engine, EngineConfig, ServeResult
from morphcache.model import HybridModel, ModelConfig
from morphcache.runtime import GuardRefused, MorphcacheError
from morphcache.testing import diskdamage

TOL = 1e-4
CFG = ModelConfig()
C, W = CFG.page_size, CFG.window


def make_engine(model: HybridModel, tmp: Path | None, **overrides: Any) -> Engine:
    """An engine with host and (when ``tmp``) disk tiers on a small GPU pool."""
    opts: dict[str, Any] = dict(gpu_pages=11, host_pages=6, disk_pages=0)
    if tmp is not None:
        opts.update(disk_pages=8, disk_dir=str(tmp / "disk"))
    opts.update(overrides)
    return Engine(EngineConfig(model=model.config, **opts), model=model)


# -- chaos: what the tiers do to cached pages between requests ------------------------------------
# An action names a page by (request index, block index) so that a guarded and an unsafe run of the
# same workload apply it to their own copy of that page.
Action = tuple[str, int, int]


def apply(engine: Engine, action: Action, history: list[ServeResult]) -> bool:
    """Apply one action; False if its page is gone or the spec refuses it."""
    what, req, block = action
    pages = history[req].pages
    if block >= len(pages):
        return False
    pid = pages[block]
    m = engine.manager
    try:
        st = m.page_state(pid)
        if st["tokens"] != tuple(history[req].tokens[block * C:(block + 1) * C]):
            return False  # the id now names another page
        if what in ("host", "disk"):
            m.offload(pid, what)
        elif what == "corrupt":
            if st["tier"] != "disk":
                m.offload(pid, "disk")
            assert m.disk is not None
            diskdamage.flip(m.disk, pid, range(-64, -32), 0x5A)
        elif what == "recompress":
            if st["pool"] == "pooled":
                m.evict(pid)
            m.recompress(pid)
        elif what == "drop":
            m.drop(pid)
        else:
            raise ValueError(what)
    except (GuardRefused, MorphcacheError):
        return False
    return True


@dataclass(frozen=True)
class Step:
    """One request: its prompt, greedy decode steps, and the chaos applied just before it."""

    prompt: tuple[int, ...]
    decode: int
    chaos: tuple[Action, ...] = ()


@dataclass
class Script:
    """Steps whose prompts are built from earlier requests' tokens (known only while running)."""

    seed: int
    steps: list[Any] = field(default_factory=list)


def _rand(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(256) for _ in range(n)]


def chaos_workload(seed: int) -> list[Any]:
    """Step builders: each takes the results so far and returns a Step.

    ::

        r0  root A (50-58 tokens), decode 2                    miss, full prefill (< 64: no slide)
        r1  r0 + new, ~100 tokens; r0's pages 1, 2 to host     prefetch from host
        r2  r1 cut inside its last sealed page + new;          prefetch from disk, mid-page hit
            r1's page 3 sent to disk                           (copy-on-write of the partial page)
        r3  r2 + new, decode 1; r1's page 4 corrupted on disk  corrupt -> recompute: prefill from 64
        r4  r3 + new; r3's page 1 recompressed                 stale indexer keys -> compress path
        r5  root B (66-70 tokens), decode 1                    miss; its page 0 slides out (W)
        r6  B cut at 20-40 + new                               window gap -> no reuse
        r7  r4 + new, decode 1                                 hit after eviction under pressure
    """
    rng = random.Random(seed)
    a = _rand(rng, rng.randint(50, 58))
    b = _rand(rng, rng.randint(66, 70))
    news = [_rand(rng, rng.randint(8, 12)) for _ in range(8)]
    news[1] = _rand(rng, 100 - len(a) + rng.randint(0, 6))
    cut2 = rng.randint(3, 12)
    cut6 = rng.randint(20, 40)

    def tok(h: list[ServeResult], i: int) -> list[int]:
        return list(h[i].tokens)

    def last_sealed_cut(h: list[ServeResult], i: int) -> list[int]:
        full = len(h[i].tokens) // C
        return tok(h, i)[: C * (full - 1) + cut2]

    return [
        lambda h: Step(tuple(a), 2),
        lambda h: Step(tuple(tok(h, 0) + news[1]), 0, (("host", 0, 1), ("host", 0, 2))),
        lambda h: Step(tuple(last_sealed_cut(h, 1) + news[2]), 0, (("disk", 1, 3),)),
        lambda h: Step(tuple(tok(h, 2) + news[3]), 1, (("corrupt", 1, 4),)),
        lambda h: Step(tuple(tok(h, 3) + news[4]), 0, (("recompress", 3, 1),)),
        lambda h: Step(tuple(b), 1),
        lambda h: Step(tuple(b[:cut6] + news[6]), 0),
        lambda h: Step(tuple(tok(h, 4) + news[7]), 1),
    ]


@dataclass
class RunLog:
    """Everything a run of a workload produced."""

    results: list[ServeResult] = field(default_factory=list)
    diffs: list[float] = field(default_factory=list)
    applied: list[Action] = field(default_factory=list)


def run_workload(engine: Engine, builders: list[Any], *, check: bool = True) -> RunLog:
    """Serve every step (chaos first); record the golden difference of each request and check the
    runtime's integrity after each one."""
    log = RunLog()
    for build in builders:
        step: Step = build(log.results)
        for action in step.chaos:
            if apply(engine, action, log.results):
                log.applied.append(action)
        engine.manager.wait_prefetches()
        result = engine.serve(step.prompt, decode=step.decode)
        log.results.append(result)
        log.diffs.append(engine.golden_diff(result))
        if check:
            engine.check_integrity()
    return log


ACTIONS = ("host", "disk", "corrupt", "recompress", "drop")


def random_workload(seed: int, requests: int) -> list[Any]:
    """Unscripted steps: each prompt cuts a root or an earlier request at a random point (often
    inside a page) and appends 1-20 new tokens; before a step, with probability 0.4, a random tier
    action hits a random page of an earlier request."""
    rng = random.Random(seed)
    roots = [_rand(rng, rng.randint(40, 120)) for _ in range(3)]
    plan = []
    for i in range(requests):
        pick = rng.randrange(len(roots) + i)
        cut = rng.random()
        new = _rand(rng, rng.randint(1, 20))
        decode = rng.choice((0, 0, 1, 2))
        chaos: tuple[Action, ...] = ()
        if i and rng.random() < 0.4:
            chaos = ((rng.choice(ACTIONS), rng.randrange(i), rng.randrange(8)),)
        plan.append((pick, cut, new, decode, chaos))

    def builder(pick: int, cut: float, new: list[int], decode: int, chaos: tuple[Action, ...]) -> Any:
        def build(h: list[ServeResult]) -> Step:
            base = roots[pick] if pick < len(roots) else list(h[pick - len(roots)].tokens)
            return Step(tuple(base[: max(1, int(cut * len(base)))] + new), decode, chaos)

        return build

    return [builder(*p) for p in plan]
