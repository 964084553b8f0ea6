"""benchmarks/bench_vs_vllm.py without vLLM: the morphcache column of the bookkeeping cycle at a small
size (each cycle checks its lease covers the cached prompt; the run ends with check_integrity)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_vs_vllm.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("morphcache_bench_vs_vllm", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_morphcache_column_only_without_vllm(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    monkeypatch.setattr(bench, "load_vllm", lambda: None)
    assert bench.main(["--sizes", "64,320", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "vLLM is not importable in this environment" in out
    assert "re-running" not in out
    assert "vLLM sha256" not in out and "mc / " not in out
    for size in ("64 tokens (4 pages", "320 tokens (20 pages"):
        assert size in out
    assert out.count("morphcache per page: validated lookup + lease") == 2
    assert out.count("attach per page") == 2 and out.count("free per page") == 2


def test_the_cycle_hits_the_whole_prompt_every_time() -> None:
    bench = _load()
    system = bench.MorphcacheCycle(96, 3)
    for i in range(3):
        system.prepare(i)
        phases = system.cycle(i)
        assert set(phases) >= {"hash + lookup", "register", "attach", "release", "append", "free"}
        assert system.cache.sequences() == ()
    assert len(system.cache.cached_pages()) == 3 * (96 // bench.PAGE + 1)
    system.close()


def test_bad_sizes_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    with pytest.raises(SystemExit):
        bench.main(["--sizes", "100"])
    assert "multiples of 16" in capsys.readouterr().err
