"""``python -m morphcache.training``: train a reference model, check or evaluate the shipped weights.

    python -m morphcache.training --model gdn-hybrid            # train, write the shipped weights
    python -m morphcache.training --model gdn-hybrid --check    # retrain from the shipped record, compare
    python -m morphcache.training --model gdn-hybrid --eval     # held-out loss of the shipped weights
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import platform
import sys
from pathlib import Path

import torch

from morphcache.model.trained import load_trained, save_trained, trained_weights
from morphcache.training.corpus import load_corpus
from morphcache.training.train import TOLERANCE, TrainResult, TrainSpec, held_out_loss, train

DEFAULT_STEPS = {"gdn-hybrid": 500, "hybrid": 1000}


def _record(result: TrainResult, corpus_files: int) -> dict[str, object]:
    return {
        "model": result.spec.model,
        "spec": dataclasses.asdict(result.spec),
        "held_out_loss": result.held_out_loss,
        "held_out_bits_per_byte": result.held_out_loss / math.log(2),
        "final_train_loss": result.final_train_loss,
        "train_seconds": round(result.seconds, 1),
        "corpus_sha256": result.corpus_sha256,
        "corpus_files": corpus_files,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "parameters": sum(p.numel() for p in result.model.parameters()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m morphcache.training", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gdn-hybrid", choices=sorted(DEFAULT_STEPS))
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the shipped run's)")
    parser.add_argument("--seed", type=int, default=0)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="retrain with the shipped spec and compare held-out loss")
    mode.add_argument("--eval", action="store_true", help="only evaluate the shipped weights")
    parser.add_argument("--out", type=Path, default=None, help="directory for the weights (default: the package's)")
    args = parser.parse_args(argv)

    corpus = load_corpus()
    print(f"corpus: {corpus.describe()}")
    if args.eval or args.check:
        shipped = trained_weights(args.model)
        if shipped.record["corpus_sha256"] != corpus.sha256:
            print(f"warning: corpus differs from the shipped run's ({shipped.record['corpus_sha256'][:16]}...)")
    if args.eval:
        spec = TrainSpec(**shipped.record["spec"])
        loss = held_out_loss(load_trained(args.model), corpus, spec.eval_windows, spec.eval_len)
        print(f"{args.model}: held-out loss {loss:.4f} nats/byte (shipped record {shipped.held_out_loss:.4f})")
        return 0
    if args.check:
        spec = TrainSpec(**shipped.record["spec"])
    else:
        steps = args.steps if args.steps is not None else DEFAULT_STEPS[args.model]
        spec = TrainSpec(model=args.model, seed=args.seed, steps=steps)
    result = train(spec, corpus, log=print)
    print(f"{args.model}: held-out loss {result.held_out_loss:.4f} nats/byte "
          f"({result.held_out_loss / math.log(2):.3f} bits/byte), {result.seconds:.0f} s")
    if args.check:
        gap = abs(result.held_out_loss - shipped.held_out_loss)
        ok = gap <= TOLERANCE
        print(f"shipped {shipped.held_out_loss:.6f}, retrained {result.held_out_loss:.6f}: difference {gap:.6f} "
              f"{'<=' if ok else '>'} tolerance {TOLERANCE}: {'OK' if ok else 'MISMATCH'}")
        return 0 if ok else 1
    path = save_trained(result.model, args.model, _record(result, corpus.n_files), args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
