"""Replay a workload through an Engine: serve every request in arrival order, compare sampled
requests with the golden forward, check the runtime's integrity after each request.

::

    for request i (arrival order):
        result = engine.serve(prompt, decode,          lookup, recovery, lease, state rebuild, cached
                              tail_replay, types,      prefill, decode (a request the GPU pool cannot
                              session, task)
                                                       hold is refused and counted, the replay goes on)
        i % sample_every == 0 ?  |cached - golden|     golden_logits over prompt + decoded tokens:
                                 top-1 agreement       max difference and top-1 agreement
            (an approximate request is always measured, whatever the sampling)
        check_integrity()                              every spec invariant on the live state
        progress(i, report)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from morphcache.engine.engine import Engine
from morphcache.engine.report import RequestReport
from morphcache.engine.session import EngineCapacityError
from morphcache.runtime import CapacityError
from morphcache.workloads import Request

Progress = Callable[[int, RequestReport], None]


@dataclass(frozen=True)
class ReplayResult:
    """Per-request reports (with ``max_abs_diff`` on sampled ones), integrity checks run, wall time,
    and the requests refused because the GPU pool could not hold them."""

    reports: tuple[RequestReport, ...]
    integrity_checks: int
    wall_s: float
    refused: tuple[str, ...] = ()


def replay(engine: Engine, requests: Sequence[Request], *, decode: int = 0, sample_every: int = 1,
           check_integrity: bool = True, progress: Progress | None = None,
           tail_replay: float | None = None) -> ReplayResult:
    """Serve ``requests`` in arrival order (see the module docstring).

    ``sample_every``: compare every n-th request with the golden forward (0: none); requests served on
    an approximate state are compared whatever it says.  ``tail_replay``: every request opts in to
    Tail-Replay with this budget (``Engine.serve``).  State: the engine's runtime and pools, as
    serving leaves them.
    """
    order = sorted(requests, key=lambda r: (r.arrival_ms, r.request_id))
    reports: list[RequestReport] = []
    refused: list[str] = []
    checks = 0
    t0 = time.perf_counter()
    for i, req in enumerate(order):
        try:
            result = engine.serve(req.tokens, decode=decode, request_id=req.request_id, tail_replay=tail_replay,
                                  types=req.spans or None, session=req.session, task=req.task)
        except (EngineCapacityError, CapacityError) as exc:
            refused.append(f"{req.request_id}: {exc}")
            if check_integrity:
                engine.check_integrity()
                checks += 1
            continue
        report = result.report
        if not report.exact or (sample_every and i % sample_every == 0):
            d = engine.divergence(result)
            report = dataclasses.replace(report, max_abs_diff=d.max_abs_diff, top1_agreement=d.top1_agreement)
        if check_integrity:
            engine.check_integrity()
            checks += 1
        reports.append(report)
        if progress is not None:
            progress(i, report)
    return ReplayResult(tuple(reports), checks, time.perf_counter() - t0, tuple(refused))
