"""Runtime benchmarks (control plane, CPU only).

(a) lookup with full validation vs a plain hash-only dict walk over the same page chain, for cached
    prefixes of 1K, 8K, 32K and 128K tokens (target at 32K: validated lookup <= 2x the walk);
(b) per-step bookkeeping of 256 sequences decoding one token each (appends, seals, compression,
    admission, window slides; target: median < 1 ms per step);
(c) replay of the Mooncake conversation trace (all requests, control plane only, bounded GPU pool with
    host and disk tiers): requests per second, nominal and effective hit rates, recoveries by path;
(d) the whole request cycle on a cached prompt (page 16, 32K and 128K tokens): hash + lookup returning
    Ready, register + attach + release + append 16, free; each phase per page;
(e) what a kernel launch pays to re-validate a held lease (page 16, 1K to 128K tokens): ``read(lease)``
    (spec ``read`` on every pinned page) after another sequence wrote and with nothing fired since the
    last read, and a kernel lease's ``check_live`` (the same through the tensor form the kernels take).

Usage: ``python benchmarks/bench_runtime.py [--only a,b,c,d,e] [--limit N] [--trace PATH]``
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from morphcache.runtime import CacheManager, NeedsRecovery, Ready, RuntimeConfig

TRACE = "mooncake_conversation_trace.jsonl"


def timings(fn: Callable[[], object], repeat: int, before: Callable[[], object] | None = None) -> list[float]:
    """Wall time of each of ``repeat`` calls, in seconds (``before``: called ahead of each, untimed)."""
    out = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def best_of(fn: Callable[[], object], repeat: int = 7) -> float:
    """Best wall time of ``repeat`` calls, in seconds."""
    return min(timings(fn, repeat))


def machine() -> str:
    """One line describing where the numbers come from."""
    cpu = platform.processor() or platform.machine()
    try:
        load = f", load {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    py = sys.version.split()[0]
    return f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} CPUs{load}, Python {py}"


# -- (a) lookup --------------------------------------------------------------------------------------
def _lookup_row(m: CacheManager, n: int, pages: int) -> None:
    tokens = list(range(n))
    m.register("s", tokens)
    m.free("s")
    walk = best_of(lambda: m.parts.index.chain(tokens))
    warm = best_of(lambda: m.probe(tokens))
    probe = m.probe(tokens)
    assert probe.nominal == probe.effective == n, probe
    lease_t = []
    for _ in range(7):
        t0 = time.perf_counter()
        r = m.lookup(tokens)
        lease_t.append(time.perf_counter() - t0)
        assert isinstance(r, Ready) and r.lease.tokens == n
        m.release(r.lease)
    full = min(lease_t)
    print(f"{n:>8} {pages:>6} {walk * 1e3:>8.3f}ms {warm * 1e3:>8.3f}ms {warm / walk:>5.2f}x "
          f"{full * 1e3:>7.3f}ms {full / walk:>5.2f}x {full / pages * 1e6:>6.3f}us")


def bench_lookup(sizes: tuple[int, ...] = (1024, 8192, 32768, 131072), page_size: int = 64) -> None:
    print(f"\n(a) lookup of a cached prefix, page size {page_size}, window 128 (times: best of 7)")
    print(f"{'tokens':>8} {'pages':>6} {'hash walk':>10} {'validated':>10} {'ratio':>6} {'+lease':>9} {'ratio':>6}"
          f" {'per page':>8}")
    for n in sizes:
        pages = n // page_size
        cfg = RuntimeConfig(page_size=page_size, window=128, gpu_pages=pages + 8, pool_capacity=pages + 8,
                            host_pages=0)
        with CacheManager(config=cfg) as m:
            _lookup_row(m, n, pages)
    print("  hash walk: the chain keys of every whole page (array operations) + one dict lookup each, nothing verified")
    print("  validated: nominal hit + every page's five objects checked with the spec's ready predicates")
    print("             (the vector backend, evaluated afresh) + effective-hit search")
    print("  +lease:    lookup() returning Ready: validated + spec 'acquire' on every page (one vector batch)")


# -- (b) decode bookkeeping --------------------------------------------------------------------------
def bench_decode(nseq: int = 256, steps: int = 400, page_size: int = 64) -> None:
    print(f"\n(b) bookkeeping of {nseq} sequences decoding one token per step, page size {page_size}, window 128")
    per_seq = 2048 // page_size + 8
    cfg = RuntimeConfig(page_size=page_size, window=128, gpu_pages=nseq * per_seq, pool_capacity=nseq * per_seq,
                        host_pages=0)
    rng = random.Random(0)
    with CacheManager(config=cfg) as m:
        for i in range(nseq):
            m.register(f"s{i}", [rng.randrange(50_000) for _ in range(rng.randrange(100, 1500))])
        before = dict(m.metrics().events_fired)
        times = []
        for _ in range(steps):
            batch = {f"s{i}": [rng.randrange(50_000)] for i in range(nseq)}
            t0 = time.perf_counter()
            m.append_batch(batch)
            times.append(time.perf_counter() - t0)
        after = m.metrics().events_fired
        m.check_integrity()
    fired = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}
    times.sort()
    print(f"  median {statistics.median(times) * 1e3:.3f} ms/step, p90 {times[int(0.9 * len(times))] * 1e3:.3f} ms, "
          f"max {times[-1] * 1e3:.3f} ms ({statistics.median(times) / nseq * 1e6:.2f} us per sequence)")
    print("  events per step: " + ", ".join(f"{k} {v / steps:.1f}" for k, v in sorted(fired.items())))


# -- (c) trace replay --------------------------------------------------------------------------------
def find_trace(explicit: str | None) -> Path | None:
    """The trace file: ``--trace``, else ../shared/traces next to the repository, else /work/shared."""
    here = Path(__file__).resolve().parent.parent
    for cand in ([Path(explicit)] if explicit else []) + [here.parent / "shared" / "traces" / TRACE,
                                                          Path("/work/shared/traces") / TRACE]:
        if cand.is_file():
            return cand
    return None


def bench_replay(path: Path, limit: int | None, page_size: int = 16, disk_root: str | None = None) -> None:
    from morphcache.workloads import load_trace

    requests = load_trace(path, block_tokens=page_size, limit=limit)
    if disk_root is None and Path("/dev/shm").is_dir():
        disk_root = "/dev/shm"  # control plane only: keep the (fsync'ed) page files off the slow disk
    disk = tempfile.mkdtemp(prefix="morphcache-bench-disk-", dir=disk_root)
    cfg = RuntimeConfig(page_size=page_size, window=2 * page_size, gpu_pages=4096, host_pages=8192, disk_pages=8192,
                        pool_capacity=20_000, disk_dir=disk, prefetch_workers=2)
    print(f"\n(c) replay of {len(requests)} requests of {path.name} (control plane only)")
    print(f"  one {page_size}-token page per 512-token trace block; window {cfg.window} tokens; tiers: GPU "
          f"{cfg.gpu_pages} pages, host {cfg.host_pages}, disk {cfg.disk_pages} (files under {disk}); "
          f"reuse pool {cfg.capacity}")
    ready = recovered = misses = 0
    requested = nominal = effective = served = 0
    built = time.perf_counter()
    try:
        with CacheManager(config=cfg) as m:
            t0 = time.perf_counter()  # the requests alone: building the manager is a one-time cost, printed apart
            built = t0 - built
            for req in requests:
                sid = req.request_id
                m.register(sid)
                res = m.lookup(req.tokens, owner=sid)
                requested += len(req.tokens)
                if isinstance(res, Ready):
                    nominal += res.nominal
                    effective += res.lease.tokens
                elif isinstance(res, NeedsRecovery):
                    nominal += res.plan.nominal
                    effective += res.plan.effective
                else:
                    nominal += res.nominal
                    effective += res.effective
                if isinstance(res, NeedsRecovery):
                    m.recover(res.plan)
                    recovered += 1
                    res = m.lookup(req.tokens, owner=sid)
                    if isinstance(res, NeedsRecovery):  # take what is readable now
                        res = m.lookup(req.tokens, limit=res.plan.effective, owner=sid)
                if isinstance(res, Ready):
                    ready += 1
                    served += res.lease.tokens
                    m.attach(sid, res.lease)
                    m.release(res.lease)
                else:
                    misses += 1
                m.append(sid, req.tokens[m.frontier(sid):])
                out_rng = random.Random(sid)
                m.append(sid, [1_000_000 + out_rng.randrange(1 << 20) for _ in range(req.output_len)])
                m.free(sid)
            elapsed = time.perf_counter() - t0
            m.check_integrity()
            s = m.metrics()
    finally:
        shutil.rmtree(disk, ignore_errors=True)
    print(f"  {len(requests)} requests in {elapsed:.1f} s: {len(requests) / elapsed:.0f} req/s (the manager, built "
          f"first, took {built:.2f} s more: spec compiled, tracked quantifiers proved)")
    print(f"  first lookup per request: nominal hit rate {nominal / requested:.3f}, effective hit rate "
          f"{effective / requested:.3f}; after recovery {served / requested:.3f} of the tokens were served "
          f"from the cache")
    print(f"  requests: {recovered} recovered first, {ready} served from the cache, {misses} full prefill; "
          f"all lookups (incl. re-lookups): ready {s.ready}, needs recovery {s.needs_recovery}, miss {s.misses}")
    gaps = sorted(s.gap_tokens_by_object.items())
    print("  gap by missing object (tokens): " + ", ".join(f"{k} {v}" for k, v in gaps))
    print("  recoveries by path: " + ", ".join(f"{k} {v}" for k, v in sorted(s.recoveries_by_path.items())))
    print("  bytes moved: " + ", ".join(f"{k} {v}" for k, v in sorted(s.bytes_moved.items())))
    if s.corrupt_pages:
        print("  corrupt pages: " + ", ".join(f"{k} {v}" for k, v in sorted(s.corrupt_pages.items())))


# -- (d) the request cycle ---------------------------------------------------------------------------
def _cycle_once(n: int, page_size: int) -> dict[str, float]:
    """One cycle on a fresh manager whose cache holds the prompt; the time of each phase."""
    pages = n // page_size
    cfg = RuntimeConfig(page_size=page_size, window=128, gpu_pages=pages + 64, pool_capacity=pages + 64, host_pages=0,
                        max_sequence_tokens=1 << 22)
    prompt = list(range(n))
    out: dict[str, float] = {}
    with CacheManager(config=cfg) as m:
        m.register("cached", prompt)
        m.free("cached")
        gc.collect()  # the setup's garbage is not the cycle's

        def timed(name: str, fn: Callable[[], object]) -> object:
            t0 = time.perf_counter()
            got = fn()
            out[name] = time.perf_counter() - t0
            return got

        res = timed("hash + lookup (Ready)", lambda: m.lookup(prompt + [1 << 30], owner="x"))
        assert isinstance(res, Ready) and res.lease.tokens == n
        timed("register", lambda: m.register("x"))
        timed("attach", lambda: m.attach("x", res.lease))
        timed("release", lambda: m.release(res.lease))
        timed("append 16", lambda: m.append("x", list(range(1 << 31, (1 << 31) + 16))))
        timed("free", lambda: m.free("x"))
    return out


def bench_cycle(sizes: tuple[int, ...] = (32768, 131072), page_size: int = 16, repeat: int = 7) -> None:
    print(f"\n(d) the request cycle on a cached prompt, page size {page_size} (each phase: median of {repeat} fresh "
          "managers)")
    for n in sizes:
        runs = [_cycle_once(n, page_size) for _ in range(repeat)]
        pages = n // page_size
        total = 0.0
        print(f"  {n // 1024}K tokens ({pages} pages)")
        for name in runs[0]:
            t = statistics.median(r[name] for r in runs)
            total += t
            print(f"    {name:<24} {t * 1e3:8.3f} ms  {t / pages * 1e6:7.3f} us/page")
        cycles = sorted(sum(r.values()) for r in runs)
        print(f"    {'whole cycle':<24} {statistics.median(cycles) * 1e3:8.3f} ms  (best {cycles[0] * 1e3:.3f} ms)")


# -- (e) re-validation before a kernel launch -------------------------------------------------------
def bench_revalidate(sizes: tuple[int, ...] = (1024, 16384, 32768, 131072), page_size: int = 16,
                     repeat: int = 21) -> None:
    print(f"\n(e) re-validation of a held lease before a kernel launch, page size {page_size} "
          f"(median of {repeat} calls)")
    print(f"{'tokens':>8} {'pages':>6} {'after a write':>14} {'per page':>9} {'unchanged':>10} {'per page':>9} "
          f"{'check_live':>11}")
    for n in sizes:
        pages = n // page_size
        cfg = RuntimeConfig(page_size=page_size, window=128, gpu_pages=pages + 64, pool_capacity=pages + 64,
                            host_pages=0, max_sequence_tokens=1 << 22)
        tokens = list(range(n))
        with CacheManager(config=cfg) as m:
            m.register("s", tokens)
            m.free("s")
            res = m.lookup(tokens)
            assert isinstance(res, Ready) and res.lease.tokens == n, res
            lease = res.lease
            kernel = m.kernel_lease([lease])
            m.register("other")
            other = iter(range(1 << 30, (1 << 30) + repeat))
            written = statistics.median(timings(partial(m.read, lease), repeat,  # another sequence's token first
                                                before=partial(_append_next, m, "other", other)))
            same = statistics.median(timings(partial(m.read, lease), repeat))
            live = statistics.median(timings(kernel.check_live, repeat))
            m.release(lease)
        print(f"{n:>8} {pages:>6} {written * 1e3:>12.3f}ms {written / pages * 1e6:>7.3f}us {same * 1e3:>8.3f}ms "
              f"{same / pages * 1e6:>7.3f}us {live * 1e3:>9.3f}ms")
    print("  read:       spec 'read' on every pinned page of the lease (one vector batch; refused: StaleLeaseError)")
    print("              after a write: another sequence appended a token just before (state changed: decided again)")
    print("              unchanged: nothing fired since the last read passed (its firings counted, not decided again)")
    print("  check_live: the kernel lease's check before each launch (the same read, per lease it carries), unchanged")


def _append_next(m: CacheManager, seq_id: str, tokens: Iterator[int]) -> None:
    """Append the next of ``tokens`` to ``seq_id`` (a write that fires spec events)."""
    m.append(seq_id, [next(tokens)])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="a,b,c,d,e", help="which parts to run (a, b, c, d, e)")
    ap.add_argument("--trace", default=None, help="path of the Mooncake-format trace")
    ap.add_argument("--limit", type=int, default=None, help="replay at most this many requests")
    ap.add_argument("--sizes", default="1024,8192,32768,131072", help="prefix sizes for (a)")
    ap.add_argument("--disk-dir", default=None, help="where (c) puts its disk tier (default /dev/shm)")
    args = ap.parse_args(argv)
    parts = set(args.only.split(","))
    print(f"morphcache runtime benchmark on {machine()}")
    if "a" in parts:
        bench_lookup(tuple(int(x) for x in args.sizes.split(",")))
    if "b" in parts:
        bench_decode()
    if "c" in parts:
        path = find_trace(args.trace)
        if path is None:
            print("\n(c) skipped: trace not found (pass --trace)")
        else:
            bench_replay(path, args.limit, disk_root=args.disk_dir)
    if "d" in parts:
        bench_cycle()
    if "e" in parts:
        bench_revalidate()


if __name__ == "__main__":
    main()
