"""benchmarks/bench_kernels.py: the CPU correctness path, the bandwidth plumbing (with a stand-in
timer, so the GPU code path's launches and byte accounting run under the interpreter too), and the
ahead-of-time compile of every kernel for sm_90, which needs no GPU."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_kernels.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("morphcache_bench_kernels", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_correctness_path(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    if torch.cuda.is_available():  # pragma: no cover - GPU machines run the full benchmark instead
        pytest.skip("CPU path only")
    assert bench.main([]) == 0
    out = capsys.readouterr().out
    assert "all kernels match their references" in out
    assert "bandwidth measurements skipped" in out
    for name in ("store", "compress", "indexer_topk", "compressed_read", "sparse_read", "window_read"):
        assert f"  {name} " in out


def test_bandwidth_path_runs_with_a_stand_in_timer(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    args = bench._parse(
        ["--batch", "2", "--contexts", "37", "64", "--hq", "4", "--hkv", "2", "--head-dim", "16",
         "--page-size", "8", "--window", "20", "--topk", "3"]
    )
    calls: list[int] = []

    def once(fn: Callable[[], object], warmup: int, iters: int) -> float:
        fn()
        calls.append(1)
        return 1.0

    bench.bandwidth(args, torch.get_default_device(), timer=once)
    out = capsys.readouterr().out
    assert len(calls) == 2 * 4 * 2  # guard on/off x four kernels x two contexts
    for name in ("compressed_read", "sparse_read", "window_read", "indexer_topk"):
        assert sum(line.strip().startswith(name) for line in out.splitlines()) == 2
    assert "WARNING" not in out


def _nvidia_backend() -> bool:
    try:
        from triton.backends import backends

        return "nvidia" in backends
    except Exception:  # pragma: no cover
        return False


@pytest.mark.skipif(not _nvidia_backend(), reason="triton has no NVIDIA backend here")
def test_every_kernel_compiles_for_sm90() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    res = subprocess.run(
        [sys.executable, str(BENCH), "--compile-check", "--arch", "90", "--contexts", "8192"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count(" ok ") == 15, res.stdout
    assert "FAILED" not in res.stdout
