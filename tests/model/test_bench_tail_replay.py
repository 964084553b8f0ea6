"""benchmarks/bench_tail_replay.py on a tiny run: the exact paths match full prefill, Tail-Replay of
the whole prefix is the full prefill again, a zero-state hit is not, and the accounting adds up."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from morphcache.model import HybridModel, model_config

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_tail_replay.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("morphcache_bench_tail_replay", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_methods_and_accounting() -> None:
    bench = _load()
    model = HybridModel(model_config("gdn-hybrid"), seed=1)
    text = torch.randint(0, 256, (400,), generator=torch.Generator().manual_seed(0))
    args = bench._parse(["--sizes", "96", "--samples", "2", "--budgets", "0", "100", "--checkpoint-pages", "1", "2",
                         "--new", "8", "--chunk", "40"])
    result = bench.run_size(model, text, 96, args, random.Random(0))
    methods = result.methods
    full, zero, whole = methods["full prefill"], methods["tail-replay 0%"], methods["tail-replay 100%"]
    assert full.samples == 2 and full.scored == 16 and full.tokens == sum(result.hits)
    assert all(64 < hit <= 96 for hit in result.hits)
    assert full.token_layers == full.full_token_layers == sum(result.hits) * 8
    assert whole.max_diff < 1e-4 and whole.token_layers == sum(result.hits) * 7
    assert zero.max_diff > 1e-2 and zero.token_layers == 0
    for k in (1, 2):
        ckpt = result.methods[f"checkpoint k={k}"]
        assert ckpt.max_diff < 1e-4 and ckpt.loss == pytest.approx(full.loss, abs=1e-5)
        assert ckpt.tokens == sum(hit % (16 * k) for hit in result.hits)
        assert ckpt.memory == sum(hit // (16 * k) for hit in result.hits) * 6 * 4 * 16 * 16 * 4


def test_main_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    argv = ["--sizes", "64", "--samples", "1", "--budgets", "5", "--checkpoint-pages", "1", "--new", "4"]
    threads = torch.get_num_threads()
    try:
        assert bench.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    for row in ("full prefill", "tail-replay 5%", "checkpoint k=1", "saved vs full", "top-1"):
        assert row in out
