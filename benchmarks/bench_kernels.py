"""Benchmark and self-check of the morphcache cache kernels.

Without CUDA (the kernels run under TRITON_INTERPRET=1) it only checks correctness: every kernel
against its plain-torch reference at small sizes, printing the max abs error.  It makes no speed
claims on CPU.

With CUDA it also measures decode reads (compressed, window, sparse, and the indexer top-k) at
8K, 32K and 128K context with realistic head counts, reporting achieved bandwidth (GB/s and
percent of ``--peak-gbs``) and the cost of the generation guard (guard on vs compiled out) in the
same run.  Device time comes from torch.cuda.Event around CUDA-graph replays of back-to-back
launches (launch overhead excluded), after warmup.

``--compile-check`` compiles every kernel for an NVIDIA target (default sm_90) without needing a
GPU, and reports register and spill counts when ptxas is available.

    python benchmarks/bench_kernels.py                       # correctness (+ bandwidth on CUDA)
    python benchmarks/bench_kernels.py --peak-gbs 4800 --batch 16 --contexts 8192 32768 131072
    python benchmarks/bench_kernels.py --compile-check --arch 90
"""

from __future__ import annotations

import argparse
import functools
import importlib
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peak-gbs", type=float, default=4800.0, help="peak memory bandwidth, GB/s (H200: 4800)")
    p.add_argument("--contexts", type=int, nargs="+", default=[8192, 32768, 131072])
    p.add_argument("--batch", type=int, default=16, help="decode sequences per launch")
    p.add_argument("--hq", type=int, default=32, help="query heads")
    p.add_argument("--hkv", type=int, default=8, help="kv heads")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--page-size", type=int, default=64, help="tokens per page (C)")
    p.add_argument("--window", type=int, default=4096, help="sliding window (W)")
    p.add_argument("--topk", type=int, default=64, help="pages selected by the indexer")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--skip-correctness", action="store_true")
    p.add_argument("--compile-check", action="store_true", help="compile for --arch without a GPU")
    p.add_argument("--arch", type=int, default=90, help="CUDA compute capability for --compile-check")
    return p.parse_args(argv)


# -- a paged layer -------------------------------------------------------------------------------
@dataclass
class Layer:
    """Pools of one layer holding B sequences of L tokens each, pages shuffled."""

    raw_k: torch.Tensor
    raw_v: torch.Tensor
    comp_k: torch.Tensor
    comp_v: torch.Tensor
    idx_k: torch.Tensor
    gen_table: torch.Tensor
    block_table: torch.Tensor
    lease_generations: torch.Tensor
    seq_lens: torch.Tensor


def make_layer(b: int, length: int, c: int, hkv: int, d: int, device: torch.device, seed: int = 0) -> Layer:
    gen = torch.Generator(device=device).manual_seed(seed)
    blocks = -(-length // c)
    n_pages = b * blocks + 1

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device)

    gen_table = torch.randint(0, 1 << 20, (n_pages,), generator=gen, device=device, dtype=torch.int32)
    perm = torch.randperm(n_pages, generator=gen, device=device)[: b * blocks].to(torch.int32)
    block_table = perm.view(b, blocks).contiguous()
    return Layer(
        raw_k=randn(n_pages, c, hkv, d),
        raw_v=randn(n_pages, c, hkv, d),
        comp_k=randn(n_pages, hkv, d),
        comp_v=randn(n_pages, hkv, d),
        idx_k=randn(n_pages, d),
        gen_table=gen_table,
        block_table=block_table,
        lease_generations=gen_table[block_table.long()].contiguous(),
        seq_lens=torch.full((b,), length, dtype=torch.int32, device=device),
    )


def _kernel_modules() -> dict[str, Any]:
    names = [
        "store", "compress", "indexer_topk", "compressed_read", "sparse_read", "window_read", "page_copy",
        "gdn_prefill", "gdn_decode", "gdn_restore",
    ]
    return {n: importlib.import_module(f"morphcache.kernels.{n}") for n in names}


def _lease(layer: Layer) -> Any:
    from morphcache.kernels import KernelLease

    class BenchLease(KernelLease):
        """Always-live lease over the benchmark layer (no runtime behind it)."""

        def __init__(self) -> None:
            self.block_table = layer.block_table
            self.lease_generations = layer.lease_generations
            self.seq_lens = layer.seq_lens

        def check_live(self) -> None:
            return None

    return BenchLease()


# -- correctness ---------------------------------------------------------------------------------
def correctness(device: torch.device) -> bool:
    """Every kernel against its reference at small, awkward sizes; prints max abs error."""
    import morphcache.kernels as mk

    gen = torch.Generator(device=device).manual_seed(1)
    b, length, c, hkv, hq, d, w, top = 3, 29, 5, 2, 6, 16, 7, 3
    layer = make_layer(b, length, c, hkv, d, device)
    lease = _lease(layer)
    n = 2 * b  # decode query + one mid-sequence (prefill-like) query per sequence
    q = torch.randn(n, hq, d, generator=gen, device=device)
    q_seq = torch.arange(n, device=device, dtype=torch.int32) % b
    q_pos = torch.tensor([length - 1] * b + [11, 4, 17], dtype=torch.int32, device=device)
    rows: list[tuple[str, float]] = []
    ok = True

    def record(name: str, got: torch.Tensor, want: torch.Tensor, exact: bool = False) -> None:
        nonlocal ok
        err = float((got.double() - want.double()).abs().max()) if got.numel() else 0.0
        ok &= (err == 0.0) if exact else (err < 1e-4)
        rows.append((name, err))

    k_new, v_new = (torch.randn(9, hkv, d, generator=gen, device=device) for _ in range(2))
    slots = torch.randperm(layer.raw_k.shape[0] * c, generator=gen, device=device)[:9]
    slots[4] = -1
    pools = [layer.raw_k.clone(), layer.raw_v.clone()]
    want_pools = [t.clone() for t in pools]
    mk.store(k_new, v_new, slots, *pools)
    mk.reference_store(k_new, v_new, slots, *want_pools)
    flat = [torch.cat([t.flatten() for t in ts]) for ts in (pools, want_pools)]
    record("store", flat[0], flat[1], True)

    bias = torch.randn(c, hkv, d, generator=gen, device=device)
    ids = layer.block_table[:, : length // c].flatten()
    outs = [layer.comp_k.clone(), layer.comp_v.clone(), layer.idx_k.clone()]
    want_outs = [t.clone() for t in outs]
    mk.compress(ids, layer.raw_k, layer.raw_v, bias, *outs)
    mk.reference_compress(ids, layer.raw_k, layer.raw_v, bias, *want_outs)
    record("compress", torch.cat([t.flatten() for t in outs]), torch.cat([t.flatten() for t in want_outs]))

    sel = mk.indexer_topk(q, q_seq, q_pos, lease, layer.idx_k, layer.gen_table, top, page_size=c)
    want_sel = mk.reference_indexer_topk(q, q_seq, q_pos, layer.block_table, layer.idx_k, top, c)
    record("indexer_topk", sel, want_sel, True)
    pools4 = (layer.comp_k, layer.comp_v, layer.raw_k, layer.raw_v)
    record(
        "compressed_read",
        mk.compressed_read(q, q_seq, q_pos, lease, *pools4, layer.gen_table),
        mk.reference_compressed_read(q, q_seq, q_pos, layer.block_table, *pools4),
    )
    record(
        "sparse_read",
        mk.sparse_read(q, q_seq, q_pos, lease, sel, *pools4, layer.gen_table),
        mk.reference_sparse_read(q, q_seq, q_pos, layer.block_table, sel, *pools4),
    )
    record(
        "window_read",
        mk.window_read(q, q_seq, q_pos, lease, layer.raw_k, layer.raw_v, layer.gen_table, w),
        mk.reference_window_read(q, q_seq, q_pos, layer.block_table, layer.raw_k, layer.raw_v, w),
    )
    page_ids = layer.block_table[1]
    staging = mk.gather_pages(layer.raw_k, page_ids)
    record("gather_pages", staging, mk.reference_gather_pages(layer.raw_k, page_ids), True)
    target, want_target = torch.zeros_like(layer.raw_k), torch.zeros_like(layer.raw_k)
    mk.scatter_pages(staging, target, page_ids)
    mk.reference_scatter_pages(staging, want_target, page_ids)
    record("scatter_pages", target, want_target, True)

    stale = layer.gen_table.clone()
    stale[layer.block_table[2, 0]] += 1
    try:
        mk.compressed_read(q, q_seq, q_pos, lease, *pools4, stale)
        caught: tuple[int, ...] = ()
    except mk.StaleReadError as e:
        caught = e.sequences
    ok &= caught == (2,)

    print(f"correctness on {device} (B={b}, T={length}, C={c}, Hq={hq}, Hkv={hkv}, D={d}, W={w}, k={top})")
    for name, err in rows:
        print(f"  {name:16s} max abs error {err:.3e}")
    print(f"  {'guard':16s} stale page detected for sequences {list(caught)}")
    print("  " + ("all kernels match their references" if ok else "MISMATCH"))
    return ok


# -- bandwidth (CUDA only) -----------------------------------------------------------------------
def _device_time_ms(fn: Callable[[], object], warmup: int, iters: int) -> float:
    """Mean device time of one ``fn()`` call: a CUDA graph of ``iters`` launches, timed with events."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(iters):
                fn()
        replay: Callable[[], object] = graph.replay
        per_replay = iters
    except RuntimeError:  # capture not possible: fall back to timing plain launches
        replay, per_replay = fn, 1
    replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = max(1, 200 // per_replay) if per_replay > 1 else iters
    start.record()
    for _ in range(reps):
        replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / (reps * per_replay)


Timer = Callable[[Callable[[], object], int, int], float]


def bandwidth(args: argparse.Namespace, dev: torch.device, timer: Timer = _device_time_ms) -> None:
    """Decode reads at every context length: GB/s, percent of peak, guard on vs compiled out.

    ``timer(fn, warmup, iters)`` returns the device milliseconds of one ``fn()``.
    """
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev)
    print(
        f"\ndecode reads on {name}: B={args.batch}, Hq={args.hq}, "
        f"Hkv={args.hkv}, D={args.head_dim}, C={args.page_size}, W={args.window}, k={args.topk}; "
        f"peak {args.peak_gbs:.0f} GB/s"
    )
    print(
        f"  {'kernel':16s} {'context':>8s} {'bytes':>10s} {'us(guard)':>10s} {'GB/s':>8s} {'%peak':>6s}"
        f" {'us(no guard)':>12s} {'guard cost':>10s}"
    )
    for length in args.contexts:
        _bench_context(args, length, dev, timer)
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def _bench_context(args: argparse.Namespace, length: int, dev: torch.device, timer: Timer) -> None:
    mods = _kernel_modules()
    b, c, hkv, hq, d = args.batch, args.page_size, args.hkv, args.hq, args.head_dim
    f32 = 4
    layer = make_layer(b, length, c, hkv, d, dev, seed=length)
    gen = torch.Generator(device=dev).manual_seed(7)
    q = torch.randn(b, hq, d, generator=gen, device=dev)
    q_seq = torch.arange(b, dtype=torch.int32, device=dev)
    q_pos = layer.seq_lens - 1
    bt = (length - 1) // c
    tail = length - bt * c
    top = min(args.topk, bt)
    scores = torch.rand(b, bt, generator=gen, device=dev)
    sel = scores.topk(top, dim=1).indices.to(torch.int32).contiguous()
    win = min(args.window, length)
    kv_token = hkv * d * f32 * 2  # k and v of one token (or of one compressed entry)
    meta = 3 * 4  # block_table + lease_generations + gen_table entry per page
    qo = b * hq * d * f32 * 2
    common = (q, q_seq, q_pos, layer.block_table, layer.lease_generations, layer.gen_table)
    pools = (layer.comp_k, layer.comp_v, layer.raw_k, layer.raw_v)
    out = torch.empty_like(q)
    flags = torch.zeros(b, dtype=torch.int32, device=dev)
    sel_out = torch.empty(b, args.topk, dtype=torch.int32, device=dev)

    def compressed(guard: bool) -> object:
        return mods["compressed_read"].launch_compressed_read(
            *common, *pools, guard=guard, out=out, error_flags=flags
        )

    def sparse(guard: bool) -> object:
        return mods["sparse_read"].launch_sparse_read(
            *common, sel, *pools, guard=guard, out=out, error_flags=flags
        )

    def window(guard: bool) -> object:
        return mods["window_read"].launch_window_read(
            *common, layer.raw_k, layer.raw_v, args.window, guard=guard, out=out, error_flags=flags
        )

    def topk(guard: bool) -> object:
        return mods["indexer_topk"].launch_indexer_topk(
            *common, layer.idx_k, args.topk, c, guard=guard, out=sel_out, error_flags=flags
        )

    cases: list[tuple[str, int, Callable[[bool], object]]] = [
        ("compressed_read", b * (bt * (kv_token + meta) + tail * kv_token + meta) + qo, compressed),
        ("sparse_read", b * (top * (kv_token + meta + 4) + tail * kv_token + meta) + qo, sparse),
        ("window_read", b * (win * kv_token + math.ceil(win / c + 1) * meta) + qo, window),
        ("indexer_topk", b * bt * (d * f32 + meta) + b * hq * d * f32, topk),
    ]
    for name, nbytes, run in cases:
        on = timer(functools.partial(run, True), args.warmup, args.iters)
        off = timer(functools.partial(run, False), args.warmup, args.iters)
        gbs = nbytes / (on * 1e-3) / 1e9
        print(
            f"  {name:16s} {length:8d} {nbytes / 1e6:9.1f}M {on * 1e3:10.1f} {gbs:8.0f} "
            f"{100 * gbs / args.peak_gbs:5.1f}% {off * 1e3:12.1f} {100 * (on - off) / off:+9.1f}%"
        )
    if bool(flags.any()):
        print("  WARNING: a guard flag was raised during the benchmark (stale generations?)")


# -- compile check (no GPU needed) ---------------------------------------------------------------
def compile_check(args: argparse.Namespace) -> bool:
    """Compile every kernel (guard on and off) for sm_<arch>; report ptxas registers/spills."""
    import shutil
    import subprocess
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    mods = _kernel_modules()
    from morphcache.kernels._attend import read_tiles
    from morphcache.kernels._contract import next_pow2

    hq, hkv, d, c, top = args.hq, args.hkv, args.head_dim, args.page_size, args.topk
    g = hq // hkv
    f, i32, i64 = "*fp32", "*i32", "*i64"
    types = {
        "q_ptr": f, "q_seq_ptr": i32, "q_pos_ptr": i32, "bt_ptr": i32, "lg_ptr": i32, "gen_ptr": i32,
        "comp_k_ptr": f, "comp_v_ptr": f, "raw_k_ptr": f, "raw_v_ptr": f, "out_ptr": f, "err_ptr": i32,
        "max_pages": "i32", "scale": "fp32", "window": "i32", "topk_ptr": i32, "idx_k_ptr": f,
        "k_ptr": f, "v_ptr": f, "slot_ptr": i64, "N": "i32", "page_ids_ptr": i32, "bias_ptr": f,
        "src_ptr": f, "dst_ptr": f, "g_ptr": f, "beta_ptr": f, "cu_ptr": i32, "start_ptr": i32,
        "state_slot_ptr": i32, "reset_ptr": i32, "states_ptr": f, "ckpt_ptr": i32, "save_ptr": i32,
        "rows_ptr": i32, "blocks_ptr": i32,
    }
    span = max(args.contexts) // c
    base = dict(C=c, HKV=hkv, G=g, D=d, BLOCK_G=next_pow2(g), BLOCK_D=next_pow2(d))
    jobs: list[tuple[str, Any, dict[str, Any]]] = []
    for guard in (True, False):
        tag = "" if guard else " (no guard)"
        jobs += [
            ("compressed_read" + tag, mods["compressed_read"]._compressed_read_kernel,
             {**base, "BLOCK_P": read_tiles(g, d, span), "BLOCK_T": read_tiles(g, d, c), "GUARD": guard}),
            ("sparse_read" + tag, mods["sparse_read"]._sparse_read_kernel,
             {**base, "K": top, "BLOCK_S": read_tiles(g, d, top), "BLOCK_T": read_tiles(g, d, c),
              "GUARD": guard}),
            ("window_read" + tag, mods["window_read"]._window_read_kernel,
             {**base, "BLOCK_T": read_tiles(g, d, args.window), "GUARD": guard}),
            ("indexer_topk" + tag, mods["indexer_topk"]._indexer_topk_kernel,
             dict(K=top, C=c, HQ=hq, D=d, BLOCK_K=next_pow2(top), BLOCK_B=min(64, 8192 // next_pow2(d)),
                  BLOCK_H=next_pow2(hq), BLOCK_D=next_pow2(d), GUARD=guard)),
        ]
    jobs += [
        ("store", mods["store"]._store_kernel,
         dict(HD=hkv * d, BLOCK_N=max(1, 4096 // next_pow2(hkv * d)), BLOCK_HD=next_pow2(hkv * d))),
        ("compress", mods["compress"]._compress_kernel,
         dict(C=c, HKV=hkv, D=d, BLOCK_C=next_pow2(c), BLOCK_D=next_pow2(d))),
        ("gather_pages", mods["page_copy"]._copy_pages_kernel,
         dict(PAGE=c * hkv * d, BLOCK=1024, GATHER=True)),
        ("scatter_pages", mods["page_copy"]._copy_pages_kernel,
         dict(PAGE=c * hkv * d, BLOCK=1024, GATHER=False)),
        ("gdn_prefill", mods["gdn_prefill"]._gdn_prefill_kernel,
         dict(C=c, H=hq, K=d, V=d, BLOCK_T=16, BLOCK_K=next_pow2(max(d, 16)), BLOCK_V=min(next_pow2(max(d, 16)), 64),
              CHECKPOINTS=True)),
        ("gdn_decode", mods["gdn_decode"]._gdn_decode_kernel,
         dict(H=hq, K=d, V=d, BLOCK_K=next_pow2(d), BLOCK_V=min(next_pow2(d), 64), SAVE=True)),
        ("gdn_restore", mods["gdn_restore"]._gdn_restore_kernel,
         dict(HKV=hq * d * d, BLOCK=min(next_pow2(hq * d * d), 1024), GUARD=True)),
    ]
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    ptxas = next((p for p in (os.path.join(bindir, "ptxas-blackwell"), os.path.join(bindir, "ptxas"),
                              shutil.which("ptxas") or "") if p and os.path.exists(p)), None)
    target = GPUTarget("cuda", args.arch, 32)
    print(f"compile check for sm_{args.arch}: Hq={hq}, Hkv={hkv}, D={d}, C={c}, k={top}")
    ok = True
    for name, kernel, consts in jobs:
        sig = {a: ("constexpr" if a in consts else types[a]) for a in kernel.arg_names}
        try:
            compiled = triton.compile(ASTSource(kernel, sig, constexprs=consts), target=target)
        except Exception as e:  # noqa: BLE001 - report every failing kernel, not just the first
            ok = False
            print(f"  {name:28s} FAILED: {str(e).splitlines()[-1] if str(e) else type(e).__name__}")
            continue
        info = ""
        if ptxas:
            with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as fh:
                fh.write(compiled.asm["ptx"])
            res = subprocess.run([ptxas, "-v", f"--gpu-name=sm_{args.arch}a", fh.name, "-o", os.devnull],
                                 capture_output=True, text=True, check=False)
            os.unlink(fh.name)
            info = " ".join(line.split(":", 1)[-1].strip() for line in res.stderr.splitlines()
                            if "registers" in line or "spill" in line)
        print(f"  {name:28s} ok  {info}")
    return ok


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's current default, stated explicitly
    if args.compile_check:
        if os.environ.get("TRITON_INTERPRET") == "1":
            print("--compile-check needs TRITON_INTERPRET unset", file=sys.stderr)
            return 2
        return 0 if compile_check(args) else 1
    cuda = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
    if not cuda:
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are defined
    dev = torch.device("cuda" if cuda else "cpu")
    ok = True if args.skip_correctness else correctness(dev)
    if cuda:
        bandwidth(args, dev)
    else:
        print("no CUDA device: bandwidth measurements skipped (kernels ran under the Triton interpreter)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
