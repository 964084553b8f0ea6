"""Tail-Replay vs checkpoint-aligned reuse vs full prefill, on the trained GDN hybrid (CPU).

A request shares its first P tokens (the matched prefix) with a cached sequence; then come 64 new
tokens. The attention layers' KV of the prefix is cached exactly (token-addressable), so what
differs between the methods is how each linear layer's recurrent state at P is obtained::

    positions     0 .................................... P-R ....... P-1 | P ... P+63
    full prefill  every layer recomputed over 0..P-1 (exact; the baseline)
    tail-replay   S = 0 at P-R, replay P-R..P-1 (R = budget x P)        approximate, no checkpoints
    checkpoint    S = exact checkpoint at Pc = (P // kC) * kC, recompute Pc..P-1    exact
                  (a checkpoint every k pages of C tokens, kept for every cached prefix)

Quality, over the 64 new tokens (each predicts the next byte of held-out text):
  loss       mean next-byte cross-entropy, nats/byte;  retained = loss_full / loss_method
  top-1      agreement of the argmax with full prefill's argmax
Compute: token-layers recomputed for the prefix (a token run through one layer). Full prefill is
P x n_layers; a replay or recompute runs only up to the last linear layer (the later layers' KV is
cached), so it costs tokens x (index of the last linear layer + 1). The 64 new tokens cost the same
for every method and are not counted. State memory: checkpoint bytes kept per cached prefix.

Hits fall anywhere relative to the checkpoint grid: each sample's P is the nominal size minus a
seeded offset in [0, max k x C), so checkpoint recompute lengths vary as they would in serving.
Text comes from the held-out split of the training corpus (never trained on).

    python benchmarks/bench_tail_replay.py                               # 1K/4K/8K, 8 samples each
    python benchmarks/bench_tail_replay.py --sizes 1024 --samples 8 --checkpoint-pages 1 4 16 64
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F  # noqa: N812

from morphcache.model import HybridModel, IncrementalState
from morphcache.model.config import model_config
from morphcache.model.incremental import RecurrentCheckpoint
from morphcache.model.trained import load_trained
from morphcache.training.corpus import load_corpus


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192], help="nominal prefix lengths")
    p.add_argument("--budgets", type=float, nargs="+", default=[0, 1, 2.5, 5, 10, 20], help="replay budgets, %%")
    p.add_argument("--checkpoint-pages", type=int, nargs="+", default=[1, 4, 16], help="k: a checkpoint every k pages")
    p.add_argument("--samples", type=int, default=8, help="held-out windows per size")
    p.add_argument("--new", type=int, default=64, help="new tokens after the prefix (each one is scored)")
    p.add_argument("--chunk", type=int, default=512, help="prefill chunk length")
    p.add_argument("--weights", choices=("trained", "random"), default="trained")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    return p.parse_args(argv)


@dataclass
class Tally:
    """Sums over samples for one method at one size."""

    nll: float = 0.0
    agree: int = 0
    scored: int = 0
    tokens: int = 0  # prefix tokens recomputed / replayed
    token_layers: int = 0
    full_token_layers: int = 0
    memory: int = 0  # checkpoint bytes kept for the prefix
    max_diff: float = 0.0  # largest |logit - full logit| over the new tokens
    samples: int = 0

    def add(self, logits: torch.Tensor, full: torch.Tensor, targets: torch.Tensor, tokens: int, token_layers: int,
            full_token_layers: int, memory: int = 0) -> None:
        self.nll += float(F.cross_entropy(logits, targets, reduction="sum"))
        self.agree += int((logits.argmax(-1) == full.argmax(-1)).sum())
        self.scored += int(targets.shape[0])
        self.tokens += tokens
        self.token_layers += token_layers
        self.full_token_layers += full_token_layers
        self.memory += memory
        self.max_diff = max(self.max_diff, float((logits - full).abs().max()))
        self.samples += 1

    @property
    def loss(self) -> float:
        return self.nll / self.scored


@dataclass
class SizeResult:
    """All methods at one nominal prefix size."""

    size: int
    hits: list[int] = field(default_factory=list)
    methods: dict[str, Tally] = field(default_factory=dict)

    def tally(self, name: str) -> Tally:
        return self.methods.setdefault(name, Tally())


def _prefill(model: HybridModel, prefix: torch.Tensor, cuts: set[int], chunk: int) -> tuple[
    IncrementalState, dict[int, RecurrentCheckpoint]
]:
    """Prefill the prefix in chunks, taking a recurrent checkpoint at every position in cuts."""
    state = IncrementalState(model)
    stops = sorted({p for p in cuts if 0 < p <= prefix.shape[0]} | set(range(chunk, prefix.shape[0], chunk))
                   | {prefix.shape[0]})
    saved: dict[int, RecurrentCheckpoint] = {0: state.checkpoint()}
    lo = 0
    for hi in stops:
        state.extend(prefix[lo:hi])
        lo = hi
        if hi in cuts:
            saved[hi] = state.checkpoint()
    return state, saved


def run_size(model: HybridModel, text: torch.Tensor, size: int, args: argparse.Namespace, rng: random.Random,
             ) -> SizeResult:
    c = model.config
    intervals = {k: k * c.page_size for k in args.checkpoint_pages}
    result = SizeResult(size)
    span = size + args.new + 1
    starts = [round(i * (len(text) - span) / max(1, args.samples - 1)) for i in range(args.samples)]
    for start in starts:
        hit = size - rng.randrange(max(intervals.values()))
        window = text[start : start + hit + args.new + 1]
        prefix, new, targets = window[:hit], window[hit : hit + args.new], window[hit + 1 :]
        result.hits.append(hit)
        points = {k: (hit // interval) * interval for k, interval in intervals.items()}
        cached, saved = _prefill(model, prefix, set(points.values()), args.chunk)
        full_cost = hit * c.n_layers
        full = cached.fork().extend(new)
        result.tally("full prefill").add(full, full, targets, hit, full_cost, full_cost)
        for budget in args.budgets:
            replayed = min(hit, round(budget / 100 * hit))
            state = cached.fork()
            state.drop_recurrent()
            cost = state.replay(replayed)
            result.tally(f"tail-replay {budget:g}%").add(state.extend(new), full, targets, replayed, cost, full_cost)
        for k, point in points.items():
            state = cached.fork()
            state.drop_recurrent()
            cost = state.replay(hit - point, start=saved[point])
            memory = (hit // intervals[k]) * saved[0].nbytes
            result.tally(f"checkpoint k={k}").add(state.extend(new), full, targets, hit - point, cost, full_cost,
                                                  memory)
    return result


def _report(result: SizeResult, kv_bytes_per_token: int) -> None:
    full = result.methods["full prefill"]
    kv = kv_bytes_per_token * full.tokens / full.samples / 1024
    print(f"\nprefix ~{result.size} tokens (hits at {', '.join(map(str, result.hits))}; "
          f"{full.samples} samples x {full.scored // max(1, full.samples)} new tokens; "
          f"attention KV cached for every method: {kv:.0f} KiB)")
    print(f"  {'method':22s} {'recomputed':>10s} {'saved vs full':>14s} {'loss':>7s} {'d loss':>7s} "
          f"{'retained':>9s} {'top-1':>7s} {'max |dlogit|':>12s} {'ckpt memory':>12s}")
    for name, t in result.methods.items():
        saved = 1 - t.token_layers / t.full_token_layers
        mem = f"{t.memory / t.samples / 1024:.0f} KiB" if t.memory else "0"
        print(f"  {name:22s} {t.tokens / t.samples:10.0f} {100 * saved:13.1f}% {t.loss:7.4f} "
              f"{t.loss - full.loss:+7.4f} {100 * full.loss / t.loss:8.1f}% {100 * t.agree / t.scored:6.1f}% "
              f"{t.max_diff:12.2e} {mem:>12s}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    model = load_trained("gdn-hybrid") if args.weights == "trained" else HybridModel(model_config("gdn-hybrid"), 0)
    corpus = load_corpus()
    text = torch.from_numpy(corpus.held_out.astype("int64"))
    need = max(args.sizes) + args.new + 1
    if len(text) < need:
        print(f"held-out text has {len(text)} bytes, fewer than {need}", file=sys.stderr)
        return 2
    c = model.config
    print(f"bench_tail_replay: gdn-hybrid ({args.weights} weights), layers "
          f"{'/'.join(k.value[0].upper() for k in c.layer_kinds)} (L linear, W full attention), C={c.page_size}; "
          f"{platform.machine()} {platform.python_version()}, torch {torch.__version__}, {args.threads} thread(s)")
    print(f"held-out text: {len(text):,} bytes of {corpus.describe()}")
    print("retained = loss_full / loss_method; top-1 = argmax agreement with full prefill; "
          "saved = token-layers not recomputed")
    attention = sum(not k.recurrent for k in c.layer_kinds)
    kv_per_token = 2 * attention * c.n_kv_heads * c.head_dim * 4
    rng = random.Random(args.seed)
    started = time.perf_counter()
    for size in args.sizes:
        t0 = time.perf_counter()
        _report(run_size(model, text, size, args, rng), kv_per_token)
        print(f"  ({time.perf_counter() - t0:.1f} s)")
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
