"""Soak: the runtime under faults for minutes, every read checked.

A seeded randomized run of one ``CacheManager`` (``morphcache.testing.soak``): requests sharing
system prompts, decode steps, leases held across aborts, graph captures, tier moves, and disk faults
(bit flips, truncated and deleted page files, an unwritable directory, a full disk).  Half the time
single-threaded, half with ``--threads`` request threads and a chaos thread (``--threads 0``: all of
it single-threaded).  Every read (``read`` payloads and kernel-lease rows, partial last pages
included) is compared with the tokens the lookup promised.

Printed: calls/s, reads checked, wrong reads, undocumented exceptions, integrity failures
(``check_integrity`` runs periodically, also with copies in flight), faults injected / reached by a
read / detected, writes a fault refused, memory (RSS) at the start and end of each phase.  Exit
status 1 on any wrong read, undocumented exception, integrity report, undetected (or falsely
detected) fault, page lost by a failed move, or uncounted disk file.

Usage: ``python benchmarks/soak.py [--minutes M] [--seed S] [--threads N] [--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

from morphcache.testing.soak import SoakConfig, SoakResult, run_soak


def machine() -> str:
    """One line describing where the figures come from."""
    try:
        load = f", load {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    return (f"{platform.system()} {platform.release()}, {platform.machine()}, {os.cpu_count()} CPUs{load}, "
            f"Python {sys.version.split()[0]}")


def _row(name: str, r: SoakResult) -> list[str]:
    inj = sum(r.faults_injected.values())
    return [name, f"{r.seconds:.0f}", f"{r.calls:,}", f"{r.calls_per_s:,.0f}", f"{r.reads_checked:,}",
            f"{r.reads_stale:,}", str(r.failures["wrong_reads"]), str(r.failures["undocumented"]),
            f"{r.failures['integrity_failures']} / {r.integrity_checks:,} ({r.integrity_checks_in_flight:,})",
            f"{inj:,}",
            f"{r.faults_reached} / {r.faults_detected}", f"{r.writes_refused:,}",
            f"{r.rss_start_mb:.0f} -> {r.rss_end_mb:.0f}"]


HEAD = ["phase", "s", "calls", "calls/s", "reads checked", "stale (refused)", "wrong reads", "undocumented",
        "integrity failures / checks (with copies in flight)", "faults injected", "faults reached / detected",
        "writes refused", "RSS MB"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=0.5, help="total run time (default 0.5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=3, help="request threads of the threaded half (0: none)")
    ap.add_argument("--json", default=None, help="write the results to this file")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.threads < 0:
        ap.error("--minutes must be > 0 and --threads >= 0")
    total = args.minutes * 60
    phases = [("single-threaded", 0, total)] if args.threads == 0 else [
        ("single-threaded", 0, total / 2), (f"{args.threads} threads + chaos", args.threads, total / 2)]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"soak: {args.minutes:g} min, seed {args.seed}; {machine()}; {when}")
    results: dict[str, Any] = {"machine": machine(), "seed": args.seed, "minutes": args.minutes, "phases": {}}
    rows = []
    ok = True
    for i, (name, threads, seconds) in enumerate(phases):
        r = run_soak(SoakConfig(seconds=seconds, seed=args.seed + i, threads=threads))
        rows.append(_row(name, r))
        results["phases"][name] = r.as_dict()
        ok = ok and r.ok
        for line in r.problems:
            print(f"  {name}: {line}")
    print("| " + " | ".join(HEAD) + " |")
    print("|" + " --- |" * len(HEAD))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    fails = {k: sum(p["failures"][k] for p in results["phases"].values()) for k in next(
        iter(results["phases"].values()))["failures"]}
    print("failures: " + ", ".join(f"{k} {v}" for k, v in fails.items()))
    print("result: " + ("PASS" if ok else "FAIL"))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
