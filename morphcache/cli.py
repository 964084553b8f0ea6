"""The ``morphcache`` command line: ``check``, ``diagram`` and ``simulate``.

Bad input of any kind (a spec, a file of its ``extends:`` chain, a trace, an argument) raises a
:class:`~morphcache.errors.InputError`; :func:`main` prints it as one line on stderr and exits 2::

    spec/x.yaml:12:9: event 'seal': 'full' is not a state of 'tail'      a problem in a file
    morphcache check: --timeout-ms: must be an integer >= 1, got 0         a problem in an argument

Argument errors found by argparse itself take the second form too.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from morphcache.args import Parser, add_limit_option, at_least, limits_of, seconds
from morphcache.errors import InputError, UsageError

DEFAULT_DEADLINE_S = 600.0


def _output_path(prog: str, option: str, path: str | None) -> None:
    """Refuse, before any work, an output path whose folder does not exist."""
    if path is None or path == "-":
        return
    folder = Path(path).parent
    if not folder.is_dir():
        raise UsageError(prog, option, f"cannot write {path}: no folder {folder}")
    if Path(path).is_dir():
        raise UsageError(prog, option, f"cannot write {path}: it is a folder")


def _write(prog: str, option: str, path: str, text: str) -> None:
    """Write ``text`` to ``path``; a failure is a :class:`UsageError` naming ``option``."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(prog, option, f"cannot write {path}: {exc.strerror or exc}") from None


def _progress(verbose: bool) -> Callable[[str], None] | None:
    if not verbose:
        return None
    start = time.monotonic()
    return lambda msg: print(f"  .. {time.monotonic() - start:6.1f} s  {msg}", file=sys.stderr, flush=True)


def _check(args: argparse.Namespace) -> int:
    from morphcache.proofs.check import Checker, CheckOptions
    from morphcache.proofs.deadline import Deadline
    from morphcache.proofs.induction import SolverLimits
    from morphcache.proofs.report import format_report, report_json
    from morphcache.proofs.trace import write_itf
    from morphcache.spec.loader import load_spec

    prog = "morphcache check"
    limits = limits_of(args, prog)
    _output_path(prog, "--json", args.json)
    _output_path(prog, "--trace-out", args.trace_out)
    progress = _progress(args.verbose)
    deadline = Deadline(args.deadline or None, progress)
    spec = load_spec(args.spec, limits=limits)
    options = CheckOptions(bmc_depth=args.bmc_depth, max_k=args.max_k, search_depth=args.search_depth,
                           limits=SolverLimits(timeout_ms=args.timeout_ms, rlimit=args.rlimit, deadline=deadline),
                           explicit_states=args.explicit_states, bmc_seconds=args.bmc_seconds,
                           parametric=args.parametric or args.parametric_constants,
                           parametric_constants=args.parametric_constants)
    report = Checker(spec, options, progress).run()
    if args.json == "-":
        print(report_json(report, spec))
    else:
        if args.json:
            _write(prog, "--json", args.json, report_json(report, spec) + "\n")
        print(format_report(report, spec))
    traces = [r.trace for r in report.refuted if r.trace is not None]
    if args.trace_out and traces:
        try:
            write_itf(spec, traces, args.trace_out)
        except OSError as exc:
            raise UsageError(prog, "--trace-out", f"cannot write {args.trace_out}: {exc.strerror or exc}") from None
        print(f"wrote ITF trace(s) to {args.trace_out}", file=sys.stderr)
    return report.exit_code


def _diagram(args: argparse.Namespace) -> int:
    from morphcache.diagrams import TraceStep, write_counterexample, write_spec_diagrams
    from morphcache.proofs.check import Checker, CheckOptions
    from morphcache.proofs.deadline import Deadline
    from morphcache.proofs.induction import SolverLimits
    from morphcache.spec.loader import load_spec

    prog = "morphcache diagram"
    limits = limits_of(args, prog)
    for path in write_spec_diagrams(args.spec, args.out, limits):
        print(path)
    if args.no_counterexamples:
        return 0
    spec = load_spec(args.spec, limits=limits)
    options = CheckOptions(limits=SolverLimits(deadline=Deadline(args.deadline or None)))
    report = Checker(spec, options).run()
    for result in report.refuted:
        if result.trace is None:
            continue
        steps = [TraceStep(st.event, dict(st.args), dict(st.state)) for st in result.trace.steps]
        try:
            paths = write_counterexample(spec, result.name, steps, args.out)
        except OSError as exc:
            raise UsageError(prog, "--out", f"cannot write to {args.out}: {exc.strerror or exc}") from None
        for path in paths:
            print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``morphcache`` command."""
    parser = Parser(prog="morphcache", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="prove or refute every property of a spec",
                           description="Prove every property by induction, or refute it with a shortest "
                                       "counterexample. Exit 0 all proved, 1 something refuted, 2 unknown or "
                                       "bad input (one line on stderr: file:line:col: message).")
    check.add_argument("spec", help="spec file (YAML)")
    check.add_argument("--bmc-depth", type=at_least(0), default=16,
                       help="deepest counterexample searched, explicitly and by BMC (default 16)")
    check.add_argument("--explicit-states", type=at_least(0), default=150_000,
                       help="states the explicit-state search visits per cone of influence before BMC takes over "
                            "(default 150000; 0: BMC alone)")
    check.add_argument("--bmc-seconds", type=seconds, default=20.0, metavar="SECONDS",
                       help="time budget of the bounded model checking of each cone (default 20; then UNKNOWN)")
    check.add_argument("--max-k", type=at_least(1), default=3, help="largest k tried by k-induction (default 3)")
    check.add_argument("--search-depth", type=at_least(0), default=0,
                       help="also run a bounded search over all properties to this depth, timed separately")
    check.add_argument("--parametric", action="store_true",
                       help="also prove for every instance size (symbolic pages and readers), reported separately")
    check.add_argument("--parametric-constants", action="store_true",
                       help="the same with the constants symbolic too")
    check.add_argument("--timeout-ms", type=at_least(1), default=60_000,
                       help="Z3 timeout per query (default 60000)")
    check.add_argument("--rlimit", type=at_least(0), default=0, help="Z3 resource limit per query (0 = none)")
    check.add_argument("--deadline", type=seconds, default=DEFAULT_DEADLINE_S, metavar="SECONDS",
                       help=f"overall time for the check, term building included; what is not settled by then "
                            f"is UNKNOWN (default {DEFAULT_DEADLINE_S:g}; 0 = none)")
    add_limit_option(check)
    check.add_argument("--trace-out", help="write refuted traces in ITF JSON to this path")
    check.add_argument("--json", help="write a machine-readable report to this path ('-' for stdout)")
    check.add_argument("-v", "--verbose", action="store_true", help="print progress to stderr")
    check.set_defaults(func=_check)

    diagram = sub.add_parser("diagram", help="write Graphviz diagrams of a spec",
                             description="Write DOT and SVG diagrams of every object lifecycle, an overview, "
                                         "and a diagram of each counterexample.")
    diagram.add_argument("spec", help="spec file (YAML)")
    diagram.add_argument("--out", required=True, help="output directory")
    diagram.add_argument("--no-counterexamples", action="store_true",
                         help="skip the check that draws each refuted property's counterexample")
    diagram.add_argument("--deadline", type=seconds, default=DEFAULT_DEADLINE_S, metavar="SECONDS",
                         help=f"overall time for that check (default {DEFAULT_DEADLINE_S:g}; 0 = none)")
    add_limit_option(diagram)
    diagram.set_defaults(func=_diagram)

    simulate = sub.add_parser("simulate", add_help=False, help="replay a workload end to end (see simulate --help)",
                              description="Replay a workload through the runtime, kernels and reference model.")
    simulate.add_argument("args", nargs=argparse.REMAINDER)
    simulate.set_defaults(func=_simulate)
    return parser


def _simulate(args: argparse.Namespace) -> int:
    from morphcache.simulate import simulate_main

    rest = list(args.args)
    return int(simulate_main(rest[1:] if rest[:1] == ["--"] else rest))


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code (2 and one line on stderr for any bad input)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["simulate"]:  # its own parser, so that `simulate --help` shows its options
        argv = ["simulate", "--", *argv[1:]]
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except InputError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped early (head, less)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps interpreter shutdown quiet
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
