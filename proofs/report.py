"""Render a check :class:`~morphcache.proofs.check.Report` as text or JSON."""

from __future__ import annotations

import json
from typing import Any

from .check import Report, Result
from .parametric import ParametricResult
from .trace import Trace, format_table, to_itf


def format_report(report: Report, spec: Any) -> str:
    """Human-readable report: one line per obligation, then each counterexample as a step table."""
    size = f"{spec.pages} pages" + (f", {spec.readers} readers" if spec.readers > 1 else "")
    lines = [f"morphcache check: {report.spec} ({size})"]
    ghosts = sorted(spec.ghosts)
    env = [ev.name for ev in spec.events if ev.env]
    if ghosts or env:
        lines.append("  ground truth: " + "; ".join(part for part in (
            f"ghosts {', '.join(ghosts)}" if ghosts else "",
            f"environment events {', '.join(env)}" if env else "") if part))
    width = max((len(r.name) for r in report.results), default=10)
    for r in report.results:
        tag = f"[{r.rule}]" if r.rule else f"[{r.kind}]"
        lines.append(f"  {r.status:<8} {r.name:<{width}}  {tag:<13} {r.method:<28} {r.seconds * 1000:8.1f} ms")
        if r.detail and r.status != "PROVED":
            lines.append(f"           {r.detail}")
    for r in report.refuted:
        lines.append("")
        lines.append(f"counterexample to {r.name}" + (f" (rule {r.rule})" if r.rule else "") + ":")
        if r.trace is not None:
            lines.append(format_table(r.trace))
        elif r.witness is not None:
            lines.append("  " + ", ".join(f"{k}={v}" for k, v in r.witness.items()))
    counts = {s: sum(1 for r in report.results if r.status == s) for s in ("PROVED", "REFUTED", "UNKNOWN")}
    if report.search is not None:
        s = report.search
        found = "a counterexample" if s.trace else ("nothing" if s.status == "PROVED" else "UNKNOWN")
        lines.append("")
        lines.append(f"bounded search to depth {s.depth}: {found} ({s.seconds:.2f} s, not a proof)")
        if s.trace is not None:
            lines.append(format_table(s.trace))
    if report.parametric is not None:
        lines.append("")
        lines += parametric_lines(report.parametric)
    lines.append("")
    lines.append(f"{counts['PROVED']} proved, {counts['REFUTED']} refuted, {counts['UNKNOWN']} unknown "
                 f"in {report.seconds:.2f} s")
    return "\n".join(lines)


def parametric_lines(par: ParametricResult) -> list[str]:
    """The section of the parametric method: what it proved for every instance size, what it could not."""
    sizes = "pages P >= 1, readers R >= 1" + (", every constant (C, MAX_PIN >= 1; the others >= 0)"
                                              if par.symbolic_constants else ", the spec's constants")
    lines = [f"for every instance size ({sizes}), parametric induction:"]
    width = max((len(n) for n in (*par.proved, *par.dropped, *par.skipped)), default=10)
    lines += [f"  PROVED   {n:<{width}}  all sizes" for n in par.proved]
    lines += [f"  UNKNOWN  {n:<{width}}  not inductive with instantiated quantifiers" for n in par.dropped]
    lines += [f"  UNKNOWN  {n:<{width}}  not attempted: {why}" for n, why in par.skipped.items()]
    unknown = len(par.dropped) + len(par.skipped)
    lines.append(f"  {len(par.proved)} proved for every size, {unknown} unknown, in {par.seconds:.2f} s")
    return lines


def _trace_json(spec: Any, trace: Trace | None) -> Any:
    return None if trace is None else {"length": trace.length, "violated": list(trace.failed),
                                       "itf": to_itf(spec, trace)}


def _result_json(spec: Any, r: Result) -> dict[str, Any]:
    return {"name": r.name, "kind": r.kind, "rule": r.rule, "status": r.status, "method": r.method,
            "seconds": round(r.seconds, 6), "detail": r.detail, "trace": _trace_json(spec, r.trace),
            "witness": r.witness}


def report_json(report: Report, spec: Any) -> str:
    """Machine-readable report for CI."""
    data: dict[str, Any] = {
        "spec": report.spec,
        "path": spec.path,
        "exit_code": report.exit_code,
        "seconds": round(report.seconds, 6),
        "results": [_result_json(spec, r) for r in report.results],
    }
    if report.parametric is not None:
        par = report.parametric
        data["parametric"] = {"proved": list(par.proved), "unknown": list(par.dropped) + list(par.skipped),
                              "not_attempted": par.skipped, "symbolic_constants": par.symbolic_constants,
                              "seconds": round(par.seconds, 6)}
    if report.search is not None:
        data["bounded_search"] = {"depth": report.search.depth, "status": report.search.status,
                                  "seconds": round(report.search.seconds, 6),
                                  "trace": _trace_json(spec, report.search.trace)}
    return json.dumps(data, indent=1)
