"""Proof benchmark: unbounded proofs of the shipped design, refutation of each bad design, and how
check time grows with the instance size (pages) and with the depth of a bounded search.

    python benchmarks/bench_proofs.py [--repeats 5] [--depths 10 20 40] [--depth-budget 300]

Every figure is measured in this run on this machine; nothing is asserted about time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from morphcache.proofs.bmc import Unrolling
from morphcache.proofs.check import PROVED, Checker, CheckOptions
from morphcache.proofs.induction import SolverLimits, Unknown
from morphcache.proofs.system import TransitionSystem
from morphcache.spec.loader import load_spec

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "spec" / "hybrid.yaml"


def machine() -> str:
    """A one-line description of the machine."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def proofs_only(spec_path: Path, pages: int | None = None) -> tuple[float, int, int]:
    """Seconds for the full check (induction, partition, layouts), proved count, total count."""
    spec = load_spec(spec_path, pages=pages)
    start = time.perf_counter()
    report = Checker(spec).run()
    seconds = time.perf_counter() - start
    return seconds, sum(r.status == PROVED for r in report.results), len(report.results)


def bounded(depth: int, budget: float, pages: int | None = None) -> str:
    """Time a bounded search over all properties to ``depth``; stop when ``budget`` seconds are spent."""
    spec = load_spec(SHIPPED, pages=pages)
    ts = TransitionSystem(spec)
    props = [p for p in spec.properties if p.kind != "lemma"]
    remaining = budget
    start = time.perf_counter()
    unrolling = Unrolling(ts, SolverLimits(timeout_ms=max(1, int(remaining * 1000))))
    import z3

    for k in range(depth + 1):
        if k:
            unrolling.extend()
        last = unrolling.states[-1]
        remaining = budget - (time.perf_counter() - start)
        if remaining <= 0:
            return f"stopped at depth {k - 1} after {budget:.0f} s budget"
        unrolling.solver.set("timeout", max(1, int(remaining * 1000)))
        try:
            model = unrolling.violation(z3.Or([z3.Not(ts.holds(p, last)) for p in props]),
                                        lambda s: z3.And([ts.holds(p, s) for p in props]))
        except Unknown:
            return f"stopped at depth {k} after {budget:.0f} s budget"
        if model is not None:
            return f"COUNTEREXAMPLE at depth {k}"
    return f"{time.perf_counter() - start:8.2f} s  (nothing found)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="runs of the shipped design's proofs (median)")
    parser.add_argument("--pages", type=int, nargs="+", default=[2, 3, 4, 5, 6], help="instance sizes")
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 20, 40], help="bounded-search depths")
    parser.add_argument("--depth-budget", type=float, default=300.0, help="seconds allowed per bounded search")
    args = parser.parse_args()

    print(f"machine: {machine()}")
    print(f"\n== unbounded proofs of {SHIPPED.name} ({args.repeats} runs)")
    runs = [proofs_only(SHIPPED) for _ in range(args.repeats)]
    times = [r[0] for r in runs]
    print(f"  obligations proved: {runs[0][1]}/{runs[0][2]}")
    print(f"  median {statistics.median(times):.3f} s   min {min(times):.3f} s   max {max(times):.3f} s")

    print("\n== refuting each bad design (full check: induction, BMC, partition, layouts)")
    for path in sorted((ROOT / "spec" / "designs").glob("*.yaml")):
        spec = load_spec(path)
        start = time.perf_counter()
        report = Checker(spec, CheckOptions()).run()
        seconds = time.perf_counter() - start
        lengths = [r.trace.length for r in report.refuted if r.trace is not None and r.name in spec.refutes]
        shown = f"{lengths[0]}-step trace" if lengths else "one-state witness"
        print(f"  {path.stem:<22} {seconds:7.2f} s   exit {report.exit_code}   {shown}", flush=True)

    print("\n== unbounded proof time by instance size (pages)")
    for pages in args.pages:
        seconds, proved, total = proofs_only(SHIPPED, pages)
        print(f"  pages={pages}   {seconds:7.3f} s   proved {proved}/{total}", flush=True)

    print(f"\n== bounded search over all properties (3 pages; budget {args.depth_budget:.0f} s each)")
    for depth in args.depths:
        print(f"  depth={depth:<3} {bounded(depth, args.depth_budget)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
