"""The ``morphcache`` command line: ``check``, ``diagram`` and ``simulate``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from morphcache.spec.errors import SpecError


def _check(args: argparse.Namespace) -> int:
    from morphcache.proofs.check import Checker, CheckOptions
    from morphcache.proofs.induction import SolverLimits
    from morphcache.proofs.report import format_report, report_json
    from morphcache.proofs.trace import write_itf
    from morphcache.spec.loader import load_spec

    spec = load_spec(args.spec)
    progress = (lambda msg: print(f"  .. {msg}", file=sys.stderr)) if args.verbose else None
    options = CheckOptions(bmc_depth=args.bmc_depth, max_k=args.max_k, search_depth=args.search_depth,
                           limits=SolverLimits(timeout_ms=args.timeout_ms, rlimit=args.rlimit),
                           explicit_states=args.explicit_states, bmc_seconds=args.bmc_seconds,
                           parametric=args.parametric or args.parametric_constants,
                           parametric_constants=args.parametric_constants)
    report = Checker(spec, options, progress).run()
    if args.json:
        Path(args.json).write_text(report_json(report, spec) + "\n") if args.json != "-" else print(
            report_json(report, spec))
    if args.json != "-":
        print(format_report(report, spec))
    traces = [r.trace for r in report.refuted if r.trace is not None]
    if args.trace_out and traces:
        write_itf(spec, traces, args.trace_out)
        print(f"wrote ITF trace(s) to {args.trace_out}", file=sys.stderr)
    return report.exit_code


def _diagram(args: argparse.Namespace) -> int:
    from morphcache.diagrams import TraceStep, diagram_main, write_counterexample
    from morphcache.proofs.check import Checker
    from morphcache.spec.loader import load_spec

    code = int(diagram_main(args.spec, args.out))
    if code != 0 or args.no_counterexamples:
        return code
    spec = load_spec(args.spec)
    report = Checker(spec).run()
    for result in report.refuted:
        if result.trace is None:
            continue
        steps = [TraceStep(st.event, dict(st.args), dict(st.state)) for st in result.trace.steps]
        for path in write_counterexample(spec, result.name, steps, args.out):
            print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``morphcache`` command."""
    parser = argparse.ArgumentParser(prog="morphcache", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="prove or refute every property of a spec",
                           description="Prove every property by induction, or refute it with a shortest "
                                       "counterexample. Exit 0 all proved, 1 something refuted, 2 unknown or "
                                       "a spec error.")
    check.add_argument("spec", help="spec file (YAML)")
    check.add_argument("--bmc-depth", type=int, default=16,
                       help="deepest counterexample searched, explicitly and by BMC (default 16)")
    check.add_argument("--explicit-states", type=int, default=150_000,
                       help="states the explicit-state search visits per cone of influence before BMC takes over "
                            "(default 150000; 0: BMC alone)")
    check.add_argument("--bmc-seconds", type=float, default=20.0,
                       help="time budget of the bounded model checking of each cone (default 20; then UNKNOWN)")
    check.add_argument("--max-k", type=int, default=3, help="largest k tried by k-induction (default 3)")
    check.add_argument("--search-depth", type=int, default=0,
                       help="also run a bounded search over all properties to this depth, timed separately")
    check.add_argument("--parametric", action="store_true",
                       help="also prove for every instance size (symbolic pages and readers), reported separately")
    check.add_argument("--parametric-constants", action="store_true",
                       help="the same with the constants symbolic too")
    check.add_argument("--timeout-ms", type=int, default=60_000, help="Z3 timeout per query (default 60000)")
    check.add_argument("--rlimit", type=int, default=0, help="Z3 resource limit per query (0 = none)")
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
    """Run the command line; return the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["simulate"]:  # its own parser, so that `simulate --help` shows its options
        argv = ["simulate", "--", *argv[1:]]
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except SpecError as exc:
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
