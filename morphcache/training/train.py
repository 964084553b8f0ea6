"""Seeded, deterministic training of a reference model on the byte-level stdlib corpus.

One thread, ``torch.use_deterministic_algorithms(True)``, batches drawn from a seeded generator:
the same spec on the same machine and corpus gives bit-identical weights. On another machine (or
CPU kind) float rounding may differ; the held-out loss then agrees within TOLERANCE.

::

    train bytes  ....[ window of seq_len + 1 ]......[ window ]....     batch random offsets (seeded)
    held-out     [w0]        [w1]        [w2] ...        [w63]         evenly spaced, fixed
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from morphcache.model.config import model_config
from morphcache.model.hybrid import HybridModel
from morphcache.model.parallel import next_token_loss
from morphcache.training.corpus import Corpus

TOLERANCE = 0.02  # nats/byte: a retrained model's held-out loss vs the shipped figure


@dataclass(frozen=True)
class TrainSpec:
    """Everything that determines the trained weights (besides the corpus and the machine)."""

    model: str = "gdn-hybrid"
    seed: int = 0
    steps: int = 500
    batch: int = 16
    seq_len: int = 256
    lr: float = 3e-3
    warmup: int = 25
    final_lr_fraction: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_windows: int = 64
    eval_len: int = 512


@dataclass(frozen=True)
class TrainResult:
    """What a run produced: the model and its figures."""

    model: HybridModel
    spec: TrainSpec
    held_out_loss: float  # nats per byte
    final_train_loss: float  # mean of the last 10% of steps
    seconds: float
    corpus_sha256: str


def learning_rate(spec: TrainSpec, step: int) -> float:
    """Linear warmup, then cosine decay to final_lr_fraction * lr."""
    if step < spec.warmup:
        return spec.lr * (step + 1) / spec.warmup
    progress = (step - spec.warmup) / max(1, spec.steps - spec.warmup)
    floor = spec.final_lr_fraction
    return spec.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def _windows(data: np.ndarray, offsets: list[int], length: int) -> torch.Tensor:
    return torch.from_numpy(np.stack([data[o : o + length] for o in offsets]).astype(np.int64))


def held_out_loss(model: HybridModel, corpus: Corpus, windows: int = 64, length: int = 512) -> float:
    """Mean next-byte loss (nats) over `windows` evenly spaced held-out windows of `length` bytes."""
    data = corpus.held_out
    if len(data) < length + 1:
        raise ValueError(f"held-out split has {len(data)} bytes, fewer than a window of {length + 1}")
    offsets = np.linspace(0, len(data) - length - 1, windows).astype(np.int64).tolist()
    total = 0.0
    with torch.no_grad():
        for lo in range(0, windows, 16):
            batch = _windows(data, offsets[lo : lo + 16], length + 1)
            total += float(next_token_loss(model, batch)) * batch.shape[0]
    return total / windows


def train(spec: TrainSpec, corpus: Corpus, log: Callable[[str], None] | None = None) -> TrainResult:
    """Train a model of config `spec.model` from its seeded initial weights; deterministic.

    Runs on one thread with deterministic algorithms; torch's thread count and determinism flag are
    restored afterwards.
    """
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        return _train(spec, corpus, log)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def _train(spec: TrainSpec, corpus: Corpus, log: Callable[[str], None] | None) -> TrainResult:
    started = time.perf_counter()
    model = HybridModel(model_config(spec.model), seed=spec.seed)
    params = list(model.parameters())
    for p in params:
        p.requires_grad_(True)
    decayed = [p for p in params if p.dim() >= 2]
    others = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decayed, "weight_decay": spec.weight_decay}, {"params": others, "weight_decay": 0.0}],
        lr=spec.lr, betas=(0.9, 0.95), foreach=False,
    )
    gen = torch.Generator().manual_seed(spec.seed)
    data = corpus.train
    losses = []
    for step in range(spec.steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(spec, step)
        offsets = torch.randint(0, len(data) - spec.seq_len - 1, (spec.batch,), generator=gen).tolist()
        loss = next_token_loss(model, _windows(data, offsets, spec.seq_len + 1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, spec.grad_clip)
        opt.step()
        losses.append(float(loss.detach()))
        if log is not None and (step % 50 == 0 or step == spec.steps - 1):
            log(f"step {step:5d}  loss {losses[-1]:.4f}  lr {learning_rate(spec, step):.2e}  "
                f"{time.perf_counter() - started:6.1f} s")
    for p in params:
        p.requires_grad_(False)
    tail = losses[-max(1, spec.steps // 10) :]
    held = held_out_loss(model, corpus, spec.eval_windows, spec.eval_len)
    return TrainResult(
        model, spec, held, sum(tail) / len(tail), time.perf_counter() - started, corpus.sha256
    )
