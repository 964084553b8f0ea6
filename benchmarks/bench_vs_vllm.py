"""Prefix-cache bookkeeping side by side: vLLM's ``KVCacheManager`` and morphcache's runtime.

One cycle per system, alternated in one run, medians compared within the run (the machine is shared
and noisy).  Page / block size 16 tokens; hybrid groups (full attention + sliding window of 4096
tokens); bookkeeping only (vLLM: ``kv_cache_tensors=[]``; morphcache: the default in-memory store)::

    request 1   prompt P (L tokens)              cached, then freed              (not timed)
    request 2   P + 16 new tokens                                                (timed)
                |<------------ L ------------>|<- 16 ->|
                 hash + lookup: hit L tokens    allocate 16 new slots, then free

    phase          vLLM                                   morphcache (public API)
    hash           Request(...) with the block hasher     (inside lookup)
    lookup         get_computed_blocks(request)           lookup(tokens) -> Ready(lease)
    allocate       allocate_slots(request, 16, ...)       register + attach(lease) + release(lease)
                                                          + append(16 tokens)
    free           free(request)                          free(sequence)

Every cycle caches a fresh prompt (disjoint token ids), so no cycle sees the state another left
behind (morphcache slides the window of a page once a sequence has moved W tokens past it; a reused
prompt would need its window replayed).  vLLM runs twice: its default ``sha256`` block hash and its
``xxhash`` option.  The whole cycle is compared with the targets of the runtime rewrite (printed as
met / not met).

The script needs ``vllm`` importable (``make bench-env`` builds ``.bench-venv`` with vLLM 0.33.0,
installed without its dependencies, next to morphcache).  Run with another Python it re-runs itself
under ``.bench-venv`` when that exists; otherwise it says vLLM is missing and prints morphcache's
column only.

    python benchmarks/bench_vs_vllm.py [--sizes 1024,8192,32768,131072] [--repeat 15] [--profile] [--clock cpu]

``--clock cpu`` times each phase with the process's CPU time instead of elapsed time: on a machine
shared with other jobs a phase of a few milliseconds is often preempted, which elapsed time counts.

Longer than most modules (~330 lines): the two adapters, the alternation and the report share the
phase names and belong together.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Protocol

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_runtime import machine  # noqa: E402  (the benchmarks folder is not a package)

from morphcache.runtime import CacheManager, Ready, RuntimeConfig  # noqa: E402

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = [time.perf_counter]  # the clock the cycles read (``--clock``)
PAGE = 16  # tokens per page (morphcache) / block (vLLM)
WINDOW = 4096  # sliding window, tokens
NEW = 16  # new tokens of the second request
BENCH_VENV = Path(__file__).resolve().parent.parent / ".bench-venv"
REEXEC_FLAG = "MORPHCACHE_BENCH_VS_VLLM_REEXEC"

# Targets of the runtime rewrite: morphcache's whole cycle / vLLM's, at these sizes; per page, in us.
CYCLE_TARGET = 0.5
CYCLE_TARGET_SIZES = (32768, 131072)
PER_PAGE_TARGETS = {"validated lookup + lease": 0.5, "attach": 0.3, "free": 0.1}
PER_PAGE = {"validated lookup + lease": "hash + lookup", "attach": "attach", "release": "release", "free": "free",
            "whole cycle": "cycle"}


def size(n: int) -> str:
    """``n`` tokens as 1K, 32K ... where it is a multiple of 1024."""
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def prompt(i: int, n: int) -> list[int]:
    """Cycle ``i``'s tokens: a prompt of ``n`` tokens then ``NEW`` new ones, disjoint from every other
    cycle's."""
    base = 1 + i * (n + NEW)
    return list(range(base, base + n + NEW))


class System(Protocol):
    name: str

    def prepare(self, i: int) -> None:
        """Cache cycle ``i``'s prompt with a first request (not timed)."""

    def cycle(self, i: int) -> dict[str, float]:
        """The timed second request; seconds per phase."""

    def close(self) -> None:
        """Check and release what the system holds."""


# -- morphcache ---------------------------------------------------------------------------------------
class MorphcacheCycle:
    """The cycle through morphcache's public API, the calls the runtime keeps stable:

    ``register(id, tokens=())``, ``lookup(tokens, owner=id) -> Ready(lease)``, ``attach(id, lease)``,
    ``release(lease)``, ``append(id, tokens)``, ``free(id)`` (see runtime/README.md, "The API").
    """

    name = "morphcache"

    def __init__(self, n: int, cycles: int) -> None:
        self.n = n
        pages = cycles * (n // PAGE + 1) + 64  # every cycle's pages stay cached: no eviction in the run
        cfg = RuntimeConfig(page_size=PAGE, window=WINDOW, gpu_pages=pages, pool_capacity=pages, host_pages=0)
        self.cache = CacheManager(config=cfg)

    def prepare(self, i: int) -> None:
        self.cache.register(f"first{i}", prompt(i, self.n)[:self.n])
        self.cache.free(f"first{i}")

    def cycle(self, i: int) -> dict[str, float]:
        cache, sid, tokens = self.cache, f"second{i}", prompt(i, self.n)
        clock = CLOCK[0]
        t0 = clock()
        res = cache.lookup(tokens, owner=sid)
        t1 = clock()
        cache.register(sid)
        t2 = clock()
        if not isinstance(res, Ready):
            raise RuntimeError(f"morphcache: expected Ready for the cached prompt, got {res!r}")
        cache.attach(sid, res.lease)
        t3 = clock()
        cache.release(res.lease)
        t4 = clock()
        cache.append(sid, tokens[self.n:])
        t5 = clock()
        cache.free(sid)
        t6 = clock()
        if res.lease.tokens != self.n:
            raise RuntimeError(f"morphcache: hit {res.lease.tokens} tokens, expected {self.n}")
        return {"hash + lookup": t1 - t0, "register": t2 - t1, "attach": t3 - t2, "release": t4 - t3,
                "append": t5 - t4, "allocate": t5 - t1, "free": t6 - t5}

    def close(self) -> None:
        self.cache.check_integrity()
        self.cache.close()


# -- vLLM ---------------------------------------------------------------------------------------------
VLLM_NAMES = {
    "torch": ["bfloat16", "__version__"],
    "vllm": ["__version__"],
    "vllm.sampling_params": ["SamplingParams"],
    "vllm.utils.hashing": ["get_hash_fn_by_name"],
    "vllm.v1.core.kv_cache_manager": ["KVCacheManager"],
    "vllm.v1.core.kv_cache_utils": ["get_request_block_hasher", "init_none_hash"],
    "vllm.v1.kv_cache_interface": ["FullAttentionSpec", "KVCacheConfig", "KVCacheGroupSpec", "SlidingWindowSpec"],
    "vllm.v1.request": ["Request"],
}


def load_vllm() -> dict[str, Any] | None:
    """What the vLLM side uses (``module.name`` keys), or None if vLLM is not importable."""
    os.environ.setdefault("PYTHONHASHSEED", "0")  # fixed seed for xxhash's NONE_HASH (quiets a warning)
    api: dict[str, Any] = {}
    try:
        for module, names in VLLM_NAMES.items():
            mod = importlib.import_module(module)
            api.update({name if module.startswith("vllm.") else f"{module}.{name}": getattr(mod, name)
                        for name in names})
    except ImportError:
        return None
    return api


class VllmCycle:
    """The same cycle through vLLM's ``KVCacheManager`` as its scheduler drives it."""

    def __init__(self, api: dict[str, Any], hash_name: str, n: int, cycles: int) -> None:
        self.api, self.n, self.name = api, n, f"vLLM {hash_name}"
        self.hash_fn = api["get_hash_fn_by_name"](hash_name)
        api["init_none_hash"](self.hash_fn)
        self.hasher = api["get_request_block_hasher"](PAGE, self.hash_fn)
        kv = dict(block_size=PAGE, num_kv_heads=1, head_size=64, dtype=api["torch.bfloat16"])
        groups = [api["KVCacheGroupSpec"](["full"], api["FullAttentionSpec"](**kv)),
                  api["KVCacheGroupSpec"](["window"], api["SlidingWindowSpec"](**kv, sliding_window=WINDOW))]
        blocks = 2 * cycles * (n // PAGE + 1) + 64  # both groups, every cycle's blocks stay cached
        config = api["KVCacheConfig"](num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=groups)
        self.manager = api["KVCacheManager"](config, max_model_len=n + NEW + PAGE, scheduler_block_size=PAGE,
                                             hash_block_size=PAGE, enable_caching=True)
        self.params = api["SamplingParams"](max_tokens=NEW)

    def _request(self, rid: str, tokens: list[int]) -> Any:
        return self.api["Request"](rid, tokens, self.params, None, block_hasher=self.hasher)

    def prepare(self, i: int) -> None:
        self.api["init_none_hash"](self.hash_fn)  # module-global in vLLM: both variants share it
        first = self._request(f"first{i}", prompt(i, self.n)[:self.n])
        if self.manager.allocate_slots(first, self.n, full_sequence_must_fit=True) is None:
            raise RuntimeError(f"{self.name}: no room for the first request")
        self.manager.free(first)

    def cycle(self, i: int) -> dict[str, float]:
        m, tokens = self.manager, prompt(i, self.n)
        clock = CLOCK[0]
        t0 = clock()
        req = self._request(f"second{i}", tokens)
        t1 = clock()
        blocks, hit, _ = m.get_computed_blocks(req)
        t2 = clock()
        out = m.allocate_slots(req, len(tokens) - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks,
                               full_sequence_must_fit=True)
        t3 = clock()
        m.free(req)
        t4 = clock()
        if hit != self.n or out is None:
            raise RuntimeError(f"{self.name}: hit {hit} tokens (expected {self.n}), allocation {out!r}")
        return {"hash": t1 - t0, "lookup": t2 - t1, "hash + lookup": t2 - t0, "allocate": t3 - t2, "free": t4 - t3}

    def close(self) -> None:
        pass


# -- the run ------------------------------------------------------------------------------------------
def measure(systems: list[System], repeat: int, warmup: int = 1) -> dict[str, dict[str, float]]:
    """Alternate the systems (rotating who goes first), ``warmup`` + ``repeat`` cycles each; the
    median per phase and of the whole cycle (phases summed per cycle), in seconds.  The garbage
    collector runs between cycles, never inside one."""
    samples: dict[str, list[dict[str, float]]] = {s.name: [] for s in systems}
    for i in range(warmup + repeat):
        for k in range(len(systems)):
            s = systems[(i + k) % len(systems)]
            s.prepare(i)
            gc.collect()
            gc.disable()
            try:
                t = s.cycle(i)
            finally:
                gc.enable()
            t["cycle"] = t["hash + lookup"] + t["allocate"] + t["free"]
            if i >= warmup:
                samples[s.name].append(t)
    return {name: {k: statistics.median(c[k] for c in cycles) for k in cycles[0]}
            for name, cycles in samples.items()}


ROWS = [("hash", "hash"), ("lookup", "lookup"), ("hash + lookup", "hash + lookup"),
        ("allocate 16 slots", "allocate"), ("free", "free"), ("whole cycle", "cycle")]


def report(n: int, med: dict[str, dict[str, float]], repeat: int) -> None:
    """One size: per-phase medians, ratios morphcache / vLLM, morphcache per page."""
    pages = n // PAGE
    names = list(med)
    vllms = [x for x in names if x != MorphcacheCycle.name]
    print(f"\n{size(n)} tokens ({pages} pages of {PAGE}), median of {repeat} cycles each, microseconds")
    head = f"  {'phase':<18}" + "".join(f"{x:>14}" for x in names)
    head += "".join(f"{'mc / ' + x.split()[-1]:>15}" for x in vllms)
    print(head)
    mc = med.get(MorphcacheCycle.name, {})
    for label, key in ROWS:
        cells = [f"{med[x][key] * 1e6:>14.1f}" if key in med[x] else f"{'-':>14}" for x in names]
        ratios = [f"{mc[key] / med[x][key]:>14.2f}x" if key in mc and key in med[x] else f"{'':>15}"
                  for x in vllms]
        print(f"  {label:<18}" + "".join(cells) + "".join(ratios))
    if mc:
        print("  morphcache allocate = " + " + ".join(f"{k} {mc[k] * 1e6:.1f}"
                                                     for k in ("register", "attach", "release", "append")))
        per = {k: mc[key] * 1e6 / pages for k, key in PER_PAGE.items()}
        print("  morphcache per page: " + ", ".join(f"{k} {v:.3f} us" for k, v in per.items()))
        print("  (morphcache hashes inside lookup(): its hash + lookup is one call, validated, returning a lease)")
    for x in vllms:
        v = med[x]
        print(f"  {x} per block: " + ", ".join(f"{k} {v[k] * 1e6 / pages:.3f} us"
                                              for k in ("hash", "lookup", "allocate", "free")))


def targets(results: dict[int, dict[str, dict[str, float]]]) -> None:
    """The rewrite's targets beside the measured figures."""
    def mark(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print("\ntargets of the runtime rewrite (measured now)")
    for n, med in results.items():
        mc = med.get(MorphcacheCycle.name)
        if mc is None:
            continue
        pages = n // PAGE
        if n in CYCLE_TARGET_SIZES:
            for x in (k for k in med if k != MorphcacheCycle.name):
                r = mc["cycle"] / med[x]["cycle"]
                label = f"whole cycle / {x}"
                print(f"  {size(n):>5} {label:<33} <= {CYCLE_TARGET}x   {r:7.2f}x    {mark(r <= CYCLE_TARGET)}")
        for k, goal in PER_PAGE_TARGETS.items():
            v = mc[PER_PAGE[k]] * 1e6 / pages
            print(f"  {size(n):>5} {k + ' per page':<33} <= {goal:.1f} us  {v:7.3f} us   {mark(v <= goal)}")


def profile(n: int, cycles: int, top: int = 10) -> None:
    """cProfile of morphcache's lookup, attach, release and free at ``n`` tokens: the functions that
    take the time (own time), for whoever makes them faster."""
    sysm = MorphcacheCycle(n, cycles)
    cache = sysm.cache
    profs = {k: cProfile.Profile() for k in ("lookup", "attach", "release", "free")}
    for i in range(cycles):
        sysm.prepare(i)
        sid, tokens = f"p{i}", prompt(i, n)
        res = profs["lookup"].runcall(cache.lookup, tokens, owner=sid)
        assert isinstance(res, Ready)
        cache.register(sid)
        profs["attach"].runcall(cache.attach, sid, res.lease)
        profs["release"].runcall(cache.release, res.lease)
        cache.append(sid, tokens[n:])
        profs["free"].runcall(cache.free, sid)
    for k, prof in profs.items():
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
        lines = [x for x in buf.getvalue().splitlines() if x.strip() and not x.strip().startswith(("List ", "Ordered"))]
        print(f"\nprofile of {k} at {size(n)} tokens ({n // PAGE} pages), {cycles} calls, top {top} by own time")
        print("\n".join(lines))
    sysm.close()


def reexec_in_bench_venv() -> bool:
    """Replace this process with the same command under .bench-venv's Python, when that exists and is
    not the Python running now.  Returns only if it did not."""
    py = BENCH_VENV / "bin" / "python"
    if os.environ.get(REEXEC_FLAG) or not py.exists() or Path(sys.prefix).resolve() == BENCH_VENV.resolve():
        return False
    print(f"vLLM is not importable here; re-running under {py} (made by `make bench-env`)", flush=True)
    os.environ[REEXEC_FLAG] = "1"
    os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])
    return False  # pragma: no cover - execv does not return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1024,8192,32768,131072", help="prompt lengths in tokens")
    ap.add_argument("--repeat", type=int, default=15, help="timed cycles per system and size (median)")
    ap.add_argument("--no-reexec", action="store_true", help="never re-run under .bench-venv")
    ap.add_argument("--profile", action="store_true", help="also profile morphcache's lookup/attach/free")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall: elapsed time; cpu: this process's CPU time (less noisy on a loaded machine)")
    args = ap.parse_args(argv)
    CLOCK[0] = CLOCKS[args.clock]
    sizes = [int(x) for x in args.sizes.split(",")]
    if any(n < PAGE or n % PAGE for n in sizes) or args.repeat < 1:
        ap.error(f"sizes must be positive multiples of {PAGE}; --repeat at least 1")
    api = load_vllm()
    if api is None and argv is None and not args.no_reexec:  # only as a program, never when called
        reexec_in_bench_venv()
    print(f"bookkeeping cycle, morphcache vs vLLM's KVCacheManager, on {machine()}")
    if api is None:
        print("vLLM is not importable in this environment (`make bench-env` builds .bench-venv with it): "
              "morphcache's column only, no ratios")
    else:
        print(f"vLLM {api['vllm.__version__']}, torch {api['torch.__version__']}; hybrid groups: full attention + "
              f"sliding window {WINDOW}, block {PAGE}, kv_cache_tensors=[]")
    print(f"morphcache: page {PAGE}, window {WINDOW}, shipped spec; cycles alternate between the systems, "
          f"one warm-up cycle each is discarded; {args.clock} clock")
    results: dict[int, dict[str, dict[str, float]]] = {}
    for n in sizes:
        cycles = args.repeat + 1
        systems: list[System] = []
        if api is not None:
            systems += [VllmCycle(api, "sha256", n, cycles), VllmCycle(api, "xxhash", n, cycles)]
        systems.append(MorphcacheCycle(n, cycles))
        results[n] = measure(systems, args.repeat)
        for s in systems:
            s.close()
        report(n, results[n], args.repeat)
    targets(results)
    if args.profile:
        for n in sizes:
            profile(n, min(args.repeat, 5))
    return 0


if __name__ == "__main__":
    sys.exit(main())
