"""``morphcache simulate``: replay a workload through the runtime, the cache kernels and the
reference model, and report hit rates, recoveries and the logit difference against the golden
forward.

Workloads:

- default: the bundled synthetic multi-turn chat (shared system prompts, growing conversations);
- ``--trace PATH``: a Mooncake-format trace, scaled down for CPU::

      --limit N          replay N requests: the first requests that continue an earlier request,
                         taken together with the requests they continue (conversation sampling)
      --max-blocks M     keep the first M blocks of each request (prefixes stay prefixes)
      --block-tokens B   B tokens per 512-token trace block (hash id -> B pseudo-random bytes)

Eviction: ``--policy NAME`` chooses the policy that proposes victims when a tier or the reuse pool is
full (``lru``, the default; ``flop``, ``semantic``, ``saecache``: ``morphcache/policies``).  The chat's
requests are typed (system, user, response spans; a session per conversation), so the typed
policies see what they use.  The default pools are the memory pressure: GPU 24 pages and host 8
(pages of 16 tokens) hold less than the default chat's 35 distinct full prompt pages (12 requests of
up to 14 pages), so every policy offloads from the GPU and spills from the host (to the disk tier,
64 pages); the report shows its evictions by decision, its refused proposals, and what it learned.

Without a GPU the kernels run under the Triton interpreter (TRITON_INTERPRET=1, set if missing).
The GPU pool is small on purpose, so pages are offloaded, spilled to disk and prefetched back.
``--unsafe`` serves the same workload with hash-only hits (no validation, no recovery, generation
guard off; on the GDN hybrid the linear layers' state is trusted as the working slot holds it) and
shows the drift it causes.

Models: ``--model hybrid`` (default: compressed-history, sliding-window and sparse-routing layers)
or ``--model gdn-hybrid`` (3 linear : 1 full attention); ``--weights seeded`` (default) or
``trained``.  On the GDN hybrid every hit rebuilds the linear layers' state exactly by recomputing
them over the hit; ``--tail-replay BUDGET`` lets every request replay only the last BUDGET x hit
tokens instead (approximate: such requests are listed apart with their measured divergence and are
never counted as exact).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from morphcache.args import Parser, add_limit_option, at_least, fraction, limits_of
from morphcache.errors import UsageError
from morphcache.limits import Limits
from morphcache.runtime.policy import policy_names

if TYPE_CHECKING:
    from morphcache.workloads import Request

DEFAULT_TRACE_LIMIT = 12
DEFAULT_BLOCK_TOKENS = 4
DEFAULT_MAX_BLOCKS = 40
PROG = "morphcache simulate"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``morphcache simulate``."""
    p = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    w = p.add_argument_group("workload")
    w.add_argument("--trace", metavar="PATH", help="replay a Mooncake-format JSONL trace instead of the chat")
    w.add_argument("--conversations", type=at_least(1), default=4, help="chat: conversations (default 4)")
    w.add_argument("--turns", type=at_least(1), default=3, help="chat: turns per conversation (default 3)")
    w.add_argument("--system-prompts", type=at_least(1), default=2,
                   help="chat: distinct system prompts (default 2)")
    w.add_argument("--seed", type=at_least(0), default=0, help="chat: workload seed (default 0)")
    w.add_argument("--limit", type=at_least(1), default=DEFAULT_TRACE_LIMIT,
                   help=f"trace: requests to replay (default {DEFAULT_TRACE_LIMIT})")
    w.add_argument("--block-tokens", type=at_least(1), default=DEFAULT_BLOCK_TOKENS,
                   help=f"trace: tokens per 512-token block (default {DEFAULT_BLOCK_TOKENS})")
    w.add_argument("--max-blocks", type=at_least(1), default=DEFAULT_MAX_BLOCKS,
                   help=f"trace: blocks kept per request (default {DEFAULT_MAX_BLOCKS})")
    w.add_argument("--decode", type=at_least(0), default=2, help="greedy tokens decoded per request (default 2)")
    add_limit_option(w)
    e = p.add_argument_group("engine")
    e.add_argument("--model", choices=("hybrid", "gdn-hybrid"), default="hybrid",
                   help="model configuration (default hybrid; gdn-hybrid: 3 linear : 1 full attention)")
    e.add_argument("--weights", choices=("seeded", "trained"), default="seeded",
                   help="seeded random weights (default) or the shipped trained weights")
    e.add_argument("--tail-replay", type=fraction, metavar="BUDGET",
                   help="gdn-hybrid: every request may rebuild the linear layers' state by replaying only the "
                        "last BUDGET x hit tokens (a fraction, e.g. 0.05): approximate, reported apart")
    e.add_argument("--policy", choices=policy_names(), default="lru",
                   help="eviction policy (default lru); the default GPU and host pools (24 + 8 pages) are "
                        "smaller than the default workload, so it evicts")
    e.add_argument("--gpu-pages", type=at_least(1), default=24,
                   help="GPU pool pages (default 24: small on purpose)")
    e.add_argument("--host-pages", type=at_least(0), default=8, help="host tier pages (default 8)")
    e.add_argument("--disk-pages", type=at_least(0), default=64,
                   help="disk tier pages (default 64; 0: no disk tier)")
    e.add_argument("--disk-dir", help="disk tier directory (default: a temporary directory)")
    e.add_argument("--ops", choices=("triton", "reference"), default="triton",
                   help="kernels: the Triton kernels (default) or their plain-torch references")
    e.add_argument("--unsafe", action="store_true",
                   help="hash-only hits: no validation, no recovery, generation guard off")
    e.add_argument("--threads", type=at_least(1), default=1,
                   help="torch intra-op threads on CPU (default 1: the model's tensors are tiny)")
    o = p.add_argument_group("output")
    o.add_argument("--sample-every", type=at_least(0), default=1,
                   help="compare every N-th request with the golden forward (default 1; 0: none)")
    o.add_argument("--no-integrity", action="store_true", help="skip check_integrity() after each request")
    o.add_argument("--json", action="store_true", help="print the report as JSON (progress goes to stderr)")
    o.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _workload(args: argparse.Namespace, limits: Limits) -> tuple[list[Request], str, tuple[str, ...]]:
    from morphcache.engine.trace_sample import sample_trace
    from morphcache.workloads import synthetic_chat

    if args.trace:
        if not Path(args.trace).is_file():
            raise UsageError(PROG, "--trace", f"no trace file at '{args.trace}'")
        s = sample_trace(args.trace, limit=args.limit, block_tokens=args.block_tokens, max_blocks=args.max_blocks,
                         limits=limits)
        name = (f"trace {os.path.basename(args.trace)} ({len(s.requests)} requests of conversations, "
                f"{args.block_tokens} tokens per block, first {args.max_blocks} blocks)")
        note = f"trace lines replayed: {', '.join(str(i) for i in s.lines)}"
        return list(s.requests), name, (note,)
    reqs = synthetic_chat(args.seed, args.conversations, args.turns, n_system_prompts=args.system_prompts,
                          user_len=(8, 20), reply_len=(16, 28))
    name = (f"synthetic chat ({args.conversations} conversations x {args.turns} turns, "
            f"{args.system_prompts} system prompts, seed {args.seed})")
    return reqs, name, ()


def _usable_folder(path: str) -> None:
    """Create ``path`` if missing; a UsageError about --disk-dir unless it is a writable folder."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(PROG, "--disk-dir", f"cannot use {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(PROG, "--disk-dir", f"cannot use {path}: not writable")


def simulate_main(argv: list[str]) -> int:
    """Run ``morphcache simulate``; 0 when every sampled exact request matched the golden forward
    (always 0 with ``--unsafe``, whose point is to show the drift; approximate requests are reported,
    not judged), 1 otherwise.  Bad input (an argument, a
    trace) raises :class:`~morphcache.errors.InputError`; ``morphcache.cli.main`` prints it and exits 2."""
    args = build_parser().parse_args(argv)
    limits = limits_of(args, PROG)
    if args.tail_replay is not None and args.unsafe:
        raise UsageError(PROG, "--tail-replay", "cannot be combined with --unsafe (it trusts every state as exact)")
    if args.tail_replay is not None and args.model != "gdn-hybrid":
        raise UsageError(PROG, "--tail-replay", f"the {args.model} model has no linear layers (use --model gdn-hybrid)")
    if args.disk_dir is not None and args.disk_pages:
        _usable_folder(args.disk_dir)
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
        torch.set_num_threads(args.threads)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from morphcache.engine import Engine, EngineConfig
    from morphcache.engine.interpreter import enable_fast_interpreter
    from morphcache.engine.render import print_summary
    from morphcache.engine.replay import replay
    from morphcache.engine.summary import summarize

    enable_fast_interpreter()
    requests, name, notes = _workload(args, limits)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    notes = notes + (f"device {device}" + (" (Triton interpreter)" if interp and args.ops == "triton" else "")
                     + ("" if device == "cuda" else f", {torch.get_num_threads()} torch thread(s)"),)
    if args.unsafe:
        notes = notes + ("unsafe: every hash hit is trusted, so effective = nominal by construction; "
                         "the drift row shows what that costs",)
    if args.weights == "trained":
        notes = notes + ("trained weights (morphcache/model/trained_weights)",)
    with tempfile.TemporaryDirectory(prefix="morphcache-disk-") as tmp:
        disk_dir = args.disk_dir or tmp
        config = EngineConfig.named(args.model, weights=args.weights, gpu_pages=args.gpu_pages,
                                    host_pages=args.host_pages, disk_pages=args.disk_pages,
                                    disk_dir=disk_dir if args.disk_pages else None, ops=args.ops,
                                    unsafe=args.unsafe, device=device, policy=args.policy)
        err = Console(stderr=True)
        with Engine(config) as engine, Progress(
            TextColumn("[bold]simulate"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
            TimeElapsedColumn(), console=err, disable=args.no_progress, transient=False,
        ) as bar:
            task = bar.add_task("", total=len(requests))

            def tick(i: int, report: object) -> None:
                from morphcache.engine.report import RequestReport

                assert isinstance(report, RequestReport)
                diff = "" if report.max_abs_diff is None else f" diff {report.max_abs_diff:.1e}"
                diff += "" if report.exact else " (approximate)"
                bar.update(task, advance=1, description=f"{report.request_id}: reused {report.reused}/"
                           f"{report.prompt_tokens}{diff}")

            run = replay(engine, requests, decode=args.decode, sample_every=args.sample_every,
                         check_integrity=not args.no_integrity, progress=tick, tail_replay=args.tail_replay)
            summary = summarize(engine, run, name, notes=notes, tail_replay=args.tail_replay)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2, sort_keys=True))
    else:
        print_summary(summary)
    return 0 if args.unsafe or summary.within_tolerance else 1


def main() -> None:  # pragma: no cover
    from morphcache.cli import main as cli_main

    raise SystemExit(cli_main(["simulate", *sys.argv[1:]]))


if __name__ == "__main__":  # pragma: no cover
    main()
