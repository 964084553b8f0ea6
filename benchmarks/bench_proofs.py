"""Proof benchmark: unbounded proofs of the shipped design, refutation of each bad design, and how
check time grows with the instance size (pages x readers) and with the depth of a bounded search.

    python benchmarks/bench_proofs.py [--repeats 5] [--pages 2 3 4 5 6] [--readers 2 3 4]
                                      [--depths 10 20] [--depth-budget 120] [--compare-bmc]
                                      [--parametric] [--parametric-constants]

``--compare-bmc`` also times each bad design with the explicit-state search switched off (bounded
model checking alone finds the counterexamples), the baseline of the catalogue figures.
Each check is timed twice: wall-clock and the CPU time of this process (``time.process_time``),
which a machine shared with other jobs inflates much less; the load average is printed at the start
and the end.
``--parametric`` times the proof of the shipped design for every instance size (symbolic pages and
readers; ``--parametric-constants``: constants symbolic too).  Every figure
is measured in this run on this machine; nothing is asserted about time.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from morphcache.proofs.bmc import BoundedSearch
from morphcache.proofs.check import PROVED, REFUTED, Checker, CheckOptions
from morphcache.proofs.induction import SolverLimits, Unknown
from morphcache.proofs.parametric import Parametric
from morphcache.proofs.system import TransitionSystem
from morphcache.spec.loader import load_spec
from morphcache.spec.model import Spec

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "spec" / "hybrid.yaml"


def machine() -> str:
    """A one-line description of the machine."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{platform.processor() or platform.machine()}, {cores} cores usable, Python {platform.python_version()}"


def load() -> str:
    """The 1/5/15-minute load averages."""
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else ""


def full_check(spec: Spec, options: CheckOptions | None = None) -> tuple[float, float, int, int, int]:
    """Wall seconds and CPU seconds for the whole check, proved count, total count, exit code."""
    start, cpu = time.perf_counter(), time.process_time()
    report = Checker(spec, options).run()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, sum(r.status == PROVED for r in report.results), len(report.results), report.exit_code


def refutation(path: Path, options: CheckOptions | None = None) -> str:
    """One row of the catalogue table: time (wall, CPU), exit code, what refuted the targeted obligation."""
    spec = load_spec(path)
    start, cpu = time.perf_counter(), time.process_time()
    report = Checker(spec, options).run()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    shown = []
    for r in report.results:
        if r.name in spec.refutes and r.status == REFUTED:
            shown.append(r.method if r.trace is not None else f"{r.method} witness")
    return f"{seconds:7.2f} s (cpu {cpu:6.2f} s)   exit {report.exit_code}   {'; '.join(shown) or 'NOT REFUTED'}"


def bounded(depth: int, budget: float) -> str:
    """Time a bounded search over all properties of the shipped design to ``depth`` (BMC, whole
    system); stop when ``budget`` seconds are spent."""
    spec = load_spec(SHIPPED)
    ts = TransitionSystem(spec)
    props = [p for p in spec.properties if p.kind != "lemma"]
    start, cpu = time.perf_counter(), time.process_time()
    search = BoundedSearch(ts, SolverLimits(timeout_ms=int(budget * 1000)))  # the budget bounds each query too
    try:
        found = search.run(props, depth, 0, stop_at_first=True, seconds=budget)
    except Unknown as exc:
        return f"stopped after {budget:.0f} s budget ({exc.reason})"
    if found:
        return f"COUNTEREXAMPLE ({next(iter(found))})"
    return f"{time.perf_counter() - start:8.2f} s (cpu {time.process_time() - cpu:.2f} s)  (nothing found)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="runs of the shipped design's proofs (median)")
    parser.add_argument("--pages", type=int, nargs="+", default=[2, 3, 4, 5, 6], help="instance sizes: pages")
    parser.add_argument("--readers", type=int, nargs="+", default=[2, 3, 4], help="instance sizes: readers")
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 20], help="bounded-search depths")
    parser.add_argument("--depth-budget", type=float, default=120.0, help="seconds allowed per bounded search")
    parser.add_argument("--compare-bmc", action="store_true",
                        help="also refute each bad design with BMC alone (no explicit-state search)")
    parser.add_argument("--parametric", action="store_true", help="also prove the shipped design for every size")
    parser.add_argument("--parametric-constants", action="store_true", help="... with symbolic constants too")
    args = parser.parse_args()

    print(f"machine: {machine()}; {load()}")
    shipped = load_spec(SHIPPED)
    print(f"\n== unbounded proofs of {SHIPPED.name}: {shipped.pages} pages, {shipped.readers} readers "
          f"({args.repeats} runs of the whole check)")
    runs = [full_check(shipped) for _ in range(args.repeats)]
    times, cpus = [r[0] for r in runs], [r[1] for r in runs]
    print(f"  obligations proved: {runs[0][2]}/{runs[0][3]}, exit {runs[0][4]}")
    print(f"  median {statistics.median(times):.3f} s   min {min(times):.3f} s   max {max(times):.3f} s   "
          f"(cpu: median {statistics.median(cpus):.3f} s)")

    print("\n== refuting each bad design (whole check: induction, search, partition, layouts)")
    designs = sorted((ROOT / "spec" / "designs").glob("*.yaml"))
    for path in designs:
        print(f"  {path.stem:<28} {refutation(path)}", flush=True)
    if args.compare_bmc:
        print("\n== the same with bounded model checking alone (no explicit-state search; 60 s budget per group)")
        options = CheckOptions(explicit_states=0, bmc_seconds=60.0)
        for path in designs:
            print(f"  {path.stem:<28} {refutation(path, options)}", flush=True)

    print("\n== unbounded proofs of the shipped design by instance size (whole check, seconds: wall/cpu)")
    print("  pages " + "".join(f"  readers={r:<5}" for r in args.readers))
    for pages in args.pages:
        row = []
        for readers in args.readers:
            seconds, cpu, proved, total, code = full_check(dataclasses.replace(shipped, pages=pages, readers=readers))
            row.append(f"{seconds:.2f}/{cpu:.2f}" + ("" if code == 0 else f" ({total - proved} not proved)"))
        print(f"  {pages:<5} " + "".join(f"  {cell:<13}" for cell in row), flush=True)

    print(f"\n== bounded search over all properties of the shipped design (budget {args.depth_budget:.0f} s each)")
    for depth in args.depths:
        print(f"  depth={depth:<3} {bounded(depth, args.depth_budget)}", flush=True)
    for symbolic in [False] * args.parametric + [True] * args.parametric_constants:
        result = Parametric(shipped, symbolic).houdini(shipped.properties)
        what = "pages, readers and constants" if symbolic else "pages and readers"
        print(f"\n== the shipped design for every instance size (symbolic {what})")
        print(f"  {len(result.proved)} of {len(shipped.properties)} lemmas and properties proved, "
              f"{len(result.dropped) + len(result.skipped)} unknown, {result.seconds:.1f} s", flush=True)
    print(f"\n{load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
