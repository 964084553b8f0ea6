"""``make demo``: the main job on the bundled defaults.

1. prove the shipped design (``morphcache check spec/hybrid.yaml``);
2. write its diagrams to ``out/diagrams``;
3. show one known-bad design refuted with a shortest counterexample (and its diagram);
4. replay the default workload end to end (``morphcache simulate``), if the engine is present.
"""

from __future__ import annotations

import sys
from pathlib import Path

from morphcache.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out"


def banner(text: str) -> None:
    """Print a section heading."""
    print(f"\n{'=' * 100}\n{text}\n{'=' * 100}", flush=True)


def run() -> int:
    """Run the demo; return a non-zero code if the shipped design is not fully proved."""
    shipped = ROOT / "spec" / "hybrid.yaml"
    bad = ROOT / "spec" / "designs" / "offload_own_lease.yaml"

    banner("1. morphcache check spec/hybrid.yaml   (the shipped design: every rule must be PROVED)")
    code = cli(["check", str(shipped)])
    if code != 0:
        print(f"the shipped design did not prove (exit {code})", file=sys.stderr)
        return code

    banner("2. morphcache diagram spec/hybrid.yaml --out out/diagrams")
    cli(["diagram", str(shipped), "--out", str(OUT / "diagrams")])

    banner("3. morphcache check spec/designs/offload_own_lease.yaml   (a known-bad design: must be REFUTED)")
    refuted = cli(["check", str(bad), "--trace-out", str(OUT / "offload_own_lease.itf.json")])
    print(f"(exit code {refuted}: 1 means a property was refuted, as expected)")
    cli(["diagram", str(bad), "--out", str(OUT / "diagrams-bad")])

    try:
        from morphcache.simulate import simulate_main
    except ImportError:
        return 0
    banner("4. morphcache simulate   (default workload through runtime, kernels and the reference model)")
    return simulate_main([])


if __name__ == "__main__":
    raise SystemExit(run())
