"""End-to-end benchmark: serving a request whose prefix is an effective hit vs prefilling it all.

For each prefix length L (default 1K, 4K, 16K tokens) on the reference model, in one engine::

    request 1 = prefix + 8 new tokens     cache empty: full prefill of L + 8 tokens      -> T_full
    request 2 = prefix + 8 other tokens   prefix cached and readable: reuse L, compute 8 -> T_hit
    speedup   = T_full / T_hit

Both times are wall time of ``Engine.serve`` (lookup, lease, runtime bookkeeping, the cached
forward, compression, release), on the same engine and ops, in the same run.  The 8 new tokens keep
request 1's last page unsealed, so its windows stay live and request 2's hit is fully readable.

Ops (the launcher interface the forward calls, morphcache/engine/ops.py):

- ``reference``: the kernels' plain-torch references (per-query loops in torch) behind the same
  interface, lease checks and generation guard included.  Measured at every size.
- ``triton``: the Triton kernels.  Without a GPU they run under the Triton interpreter
  (TRITON_INTERPRET=1), about 0.1 s per computed token at 1K and slower as the prefix grows, so a
  full prefill is measured only up to ``--triton-full-upto`` tokens (default 1024); above it only
  the cached path is measured and the speedup is not reported.

With compiled kernels (a GPU), one untimed request pair at the smallest prefix length compiles them
first, so no timing includes Triton's JIT compilation.

``--check`` compares request 2's logits with the golden forward (full recomputation) for
prefixes up to that many tokens (default 1024).

    python benchmarks/bench_e2e.py
    python benchmarks/bench_e2e.py --sizes 1024 4096 16384 --ops reference triton --triton-full-upto 1024
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 16384], help="prefix lengths")
    p.add_argument("--new", type=int, default=8, help="new tokens after the prefix (< page size)")
    p.add_argument("--ops", nargs="+", choices=("reference", "triton"), default=["reference", "triton"])
    p.add_argument("--triton-full-upto", type=int, default=1024,
                   help="largest prefix whose full prefill is measured with the Triton ops")
    p.add_argument("--triton-cached-upto", type=int, default=16384,
                   help="largest prefix whose cached path is measured with the Triton ops")
    p.add_argument("--check", type=int, default=1024, help="golden check up to this prefix length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads on CPU (default 1)")
    return p.parse_args(argv)


@dataclass(frozen=True)
class Row:
    """One measurement: prefix length, ops, the two wall times (None: not measured)."""

    prefix: int
    ops: str
    t_full: float | None
    t_hit: float | None
    reused: int
    computed_hit: int
    max_diff: float | None


def _engine(ops: str, prefix: int, new: int, seed: int):  # type: ignore[no-untyped-def]
    from morphcache.engine import Engine, EngineConfig

    pages = (prefix + 2 * new) // 16 + 8
    device = "cuda" if _cuda() else "cpu"
    return Engine(EngineConfig(seed=seed, gpu_pages=pages, host_pages=8, ops=ops, device=device))


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _sync() -> None:
    if _cuda():
        import torch

        torch.cuda.synchronize()


def measure(ops: str, prefix_len: int, args: argparse.Namespace) -> Row:
    """Serve request 1 (full prefill, if measured) then request 2 (effective hit) on one engine."""
    rng = random.Random(args.seed * 1_000_003 + prefix_len)
    prefix = [rng.randrange(256) for _ in range(prefix_len)]
    first = prefix + [rng.randrange(256) for _ in range(args.new)]
    second = prefix + [rng.randrange(256) for _ in range(args.new)]
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    full_ok = ops == "reference" or not interp or prefix_len <= args.triton_full_upto
    with _engine(ops, prefix_len, args.new, args.seed) as engine:
        t_full = None
        if full_ok:
            _sync()
            t0 = time.perf_counter()
            engine.serve(first)
            _sync()
            t_full = time.perf_counter() - t0
        else:  # warm the cache without timing it: the reference ops write the same pages
            from morphcache.engine.ops import ReferenceOps

            real = engine.ops
            engine.ops = ReferenceOps()
            engine.serve(first)
            engine.ops = real
        _sync()
        t0 = time.perf_counter()
        result = engine.serve(second)
        _sync()
        t_hit = time.perf_counter() - t0
        diff = engine.golden_diff(result) if prefix_len <= args.check else None
        return Row(prefix_len, engine.ops.name, t_full, t_hit, result.report.reused, result.report.computed, diff)


def _fmt(t: float | None) -> str:
    return "-" if t is None else f"{t:9.3f}"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
        torch.set_num_threads(args.threads)
    from morphcache.engine.interpreter import enable_fast_interpreter

    fast = enable_fast_interpreter()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    print(f"device {device}; Triton interpreter {'on' if interp else 'off'}"
          f"{' (nested re-patch skipped)' if fast else ''}; torch threads {torch.get_num_threads()}")
    print(f"request = prefix + {args.new} new tokens; T_full = prefill of prefix + new on an empty cache, "
          f"T_hit = same engine, prefix reused, {args.new} tokens computed\n")
    measure("reference", 64, args)  # warm-up (imports, allocator)
    if "triton" in args.ops and not interp:  # compiled kernels: JIT-compile them here, outside the timings
        measure("triton", min(args.sizes), args)
    rows: list[Row] = []
    for ops in args.ops:
        for size in args.sizes:
            if ops == "triton" and interp and size > args.triton_cached_upto:
                continue
            row = measure(ops, size, args)
            rows.append(row)
            speed = f"{row.t_full / row.t_hit:8.1f}x" if row.t_full and row.t_hit else "       -"
            diff = "-" if row.max_diff is None else f"{row.max_diff:.1e}"
            print(f"  measured {ops:9s} prefix {size:6d}: full {_fmt(row.t_full).strip()} s, "
                  f"hit {_fmt(row.t_hit).strip()} s, speedup {speed.strip()}, golden diff {diff}",
                  file=sys.stderr, flush=True)
    print(f"{'prefix':>8} {'ops':>10} {'T_full (s)':>11} {'T_hit (s)':>10} {'speedup':>9} {'reused':>8} "
          f"{'computed':>9} {'|diff|':>8}")
    for r in rows:
        speed = f"{r.t_full / r.t_hit:8.1f}x" if r.t_full and r.t_hit else "        -"
        diff = "-" if r.max_diff is None else f"{r.max_diff:.1e}"
        print(f"{r.prefix:>8} {r.ops:>10} {_fmt(r.t_full):>11} {_fmt(r.t_hit):>10} {speed:>9} {r.reused:>8} "
              f"{r.computed_hit:>9} {diff:>8}")
    if interp and any(r.ops == "triton" and r.t_full is None for r in rows):
        print(f"\n'-': the full prefill under the Triton interpreter is not measured above "
              f"{args.triton_full_upto} tokens (far too slow on CPU); those rows time the cached path only, "
              "with the cache warmed by the reference ops (same page contents).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
