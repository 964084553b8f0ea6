"""The kernel launchers require the alignment the spec's layouts declare (one number, two readers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from morphcache.engine import Engine, EngineConfig, TritonOps
from morphcache.engine.ops import layout_alignment
from morphcache.kernels import AlignmentError
from morphcache.model import HybridModel
from morphcache.runtime.base import SHIPPED_SPEC as SHIPPED  # the spec the runtime executes
from morphcache.spec.loader import load_spec


def _variant(tmp_path: Path, align: int) -> Path:
    path = tmp_path / "aligned.yaml"
    path.write_text(f"extends: {SHIPPED}\nlayouts:\n  raw_k:\n    align: {align}\n")
    return path


def test_engine_uses_the_declared_alignment(model: HybridModel, tmp_path: Path) -> None:
    assert layout_alignment(load_spec(SHIPPED)) == 16
    with Engine(EngineConfig(model=model.config, gpu_pages=8, host_pages=4), model=model,
                spec=str(_variant(tmp_path, 64))) as engine:
        assert isinstance(engine.ops, TritonOps) and engine.ops.alignment == 64


def test_a_misaligned_pool_is_refused_at_the_declared_alignment() -> None:
    import torch

    ops = TritonOps(alignment=64)
    base = torch.zeros(16 * 4 * 2 * 16 + 4)
    raw_k = base[4:].view(4, 16, 2, 16)  # 16 bytes past a 64-byte boundary at best
    raw_v = torch.zeros(4, 16, 2, 16)
    k = torch.zeros(1, 2, 16)
    with pytest.raises(AlignmentError):
        ops.store(k, k.clone(), torch.tensor([0]), raw_k, raw_v)
