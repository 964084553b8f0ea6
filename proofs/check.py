"""``morphcache check``: prove or refute every property, lemma, partition and layout obligation.

Order of work:

1. induction: Houdini over all lemmas, properties and definedness obligations (every ``//`` and
   ``%`` has a non-zero divisor where it is evaluated); the inductive survivors are PROVED;
2. each remaining candidate: a shortest counterexample (REFUTED), searched on its cone of influence
   by explicit states and then bounded model checking (:mod:`proofs.search`); else k-induction
   (PROVED), else UNKNOWN;
3. diversion: the recovery-path partition, assuming the proved invariants;
4. layouts: bit-vector alignment, bounds and overlap proofs.

Z3 ``unknown`` or a timeout is always UNKNOWN, never PROVED; so is everything not settled when the
overall deadline (``SolverLimits.deadline``, which also bounds term building) passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from morphcache.spec.model import Property, Spec

from .bmc import search_all
from .deadline import DeadlineExpired
from .definedness import Definedness, check_constant_divisors
from .induction import Induction, SolverLimits, Unknown, timed
from .layouts import layout_obligations
from .parametric import Parametric, ParametricResult
from .partition import Partition
from .search import CounterexampleSearch, Finding, SearchOptions
from .slicing import Slice
from .system import TransitionSystem
from .trace import Trace

PROVED, REFUTED, UNKNOWN = "PROVED", "REFUTED", "UNKNOWN"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Result:
    """The verdict on one obligation."""

    name: str
    kind: str  # lemma | invariant | step | defined | partition | layout
    status: str
    method: str
    seconds: float
    rule: str | None = None
    detail: str = ""
    trace: Trace | None = None
    witness: dict[str, Any] | None = None


@dataclass(frozen=True)
class CheckOptions:
    """Knobs of a check run."""

    bmc_depth: int = 16  # deepest counterexample searched (explicit states, then BMC)
    max_k: int = 3
    explicit_states: int = 150_000  # states the explicit search visits per property group before BMC
    bmc_seconds: float | None = 20.0  # wall-clock budget of the bounded model checking of each property group
    limits: SolverLimits = field(default_factory=SolverLimits)
    search_depth: int = 0  # extra bounded search over all properties, reported separately
    constants: Mapping[str, int] | None = None
    parametric: bool = False  # also prove for every instance size (symbolic pages and readers), reported separately
    parametric_constants: bool = False  # ... with symbolic constants too


@dataclass(frozen=True)
class SearchResult:
    """The separate bounded search: depth reached, what it found, and its time."""

    depth: int
    status: str
    seconds: float
    trace: Trace | None = None


@dataclass(frozen=True)
class Report:
    """Everything a check run found."""

    spec: str
    results: tuple[Result, ...]
    seconds: float
    search: SearchResult | None = None
    parametric: ParametricResult | None = None  # evidence of its own: it does not change the exit code

    @property
    def exit_code(self) -> int:
        """0 all proved, 1 something refuted, 2 something unknown."""
        statuses = {r.status for r in self.results}
        if self.search is not None:
            statuses.add(self.search.status)
        if REFUTED in statuses:
            return 1
        return 2 if UNKNOWN in statuses else 0

    @property
    def refuted(self) -> list[Result]:
        """The refuted results."""
        return [r for r in self.results if r.status == REFUTED]


class Checker:
    """Runs every obligation of one spec."""

    def __init__(self, spec: Spec, options: CheckOptions | None = None, progress: Progress | None = None) -> None:
        self.spec = spec
        self.options = options or CheckOptions()
        self.progress = progress or (lambda _msg: None)
        constants = dict(self.options.constants or {})
        check_constant_divisors(spec, constants)
        self.obligations = list(spec.properties) + Definedness(spec, constants).obligations()
        self.ts = TransitionSystem(spec, self.options.constants)
        self.ts.terms.deadline = self.options.limits.deadline
        self.induction = Induction(self.ts, self.options.limits)

    def run(self) -> Report:
        """Check everything and return the report."""
        start = time.perf_counter()
        self.progress(f"{self.spec.name}: {self.spec.pages} pages, {len(self.ts.actions)} actions, "
                      f"{len(self.ts.slots)} state slots, {len(self.spec.properties)} properties")
        results, proved = self.prove_properties()
        self.progress("recovery partition")
        results += self.check_partition(proved)
        self.progress("layouts")
        results += self.check_layouts()
        search = self.bounded_search() if self.options.search_depth else None
        parametric = None
        if self.options.parametric:
            parametric = Parametric(self.spec, self.options.parametric_constants,
                                    self.options.limits.timeout_ms).houdini(self.spec.properties, self.progress)
        return Report(self.spec.name, tuple(results), time.perf_counter() - start, search, parametric)

    # -- properties ------------------------------------------------------------------------------
    def prove_properties(self) -> tuple[list[Result], list[Property]]:
        """Houdini induction, then the counterexample search and k-induction for what it could not prove."""
        candidates = list(self.obligations)
        try:
            proved, seconds = timed(lambda: self.induction.houdini(candidates, self.progress))
        except Unknown as exc:
            return [self._unknown(p, "induction", 0.0, exc) for p in candidates], []
        method = f"induction ({len(proved)} invariant{'' if len(proved) == 1 else 's'})"
        by_name = {p.name: Result(p.name, p.kind, PROVED, method, seconds, p.rule) for p in proved}
        rest = [p for p in candidates if p.name not in by_name]
        by_name.update(self.settle(rest, proved))
        return [by_name[p.name] for p in candidates], proved

    def settle(self, props: list[Property], proved: list[Property]) -> dict[str, Result]:
        """Candidates that are not inductive: shortest counterexamples (explicit states), else
        k-induction, else deeper counterexamples (BMC), else UNKNOWN; one cone of influence at a time."""
        out: dict[str, Result] = {}
        if not props:
            return out
        opts = self.options
        search = CounterexampleSearch(self.spec, SearchOptions(
            max_depth=opts.bmc_depth, explicit_states=opts.explicit_states, bmc_seconds=opts.bmc_seconds,
            limits=opts.limits, constants=opts.constants), proved, self.progress)
        groups = search.groups(props)
        own = {p.name: keep for keep, group in groups for p in group}
        searched = {p.name: -1 for p in props}
        for keep, group in reversed(groups):  # largest cone first: it also decides every property it contains
            here = [p for p in props if p.name not in out and search.covers(keep, p)]
            if not any(p in here for p in group):
                continue
            start = time.perf_counter()
            findings = search.explicit(keep, here)
            for p in here:
                if self._settled(out, p, findings[p.name], start) is None:
                    searched[p.name] = max(searched[p.name], findings[p.name].depth)
        pending = [(own[p.name], p, searched[p.name]) for p in props if p.name not in out]
        if pending:
            start = time.perf_counter()
            for name, result in self.k_induct([p for _, p, _ in pending], proved,
                                              min(d for _, _, d in pending)).items():
                out[name] = result
        deeper: dict[Slice, list[tuple[Property, int]]] = {}
        for keep, prop, depth in pending:
            if prop.name not in out:
                deeper.setdefault(keep, []).append((prop, depth))
        for keep, items in deeper.items():
            start = time.perf_counter()
            found = search.bounded(keep, [p for p, _ in items], min(d for _, d in items) + 1)
            for prop, _ in items:
                if self._settled(out, prop, found[prop.name], start) is None:
                    f = found[prop.name]
                    detail = f"z3: {f.unknown}" if f.unknown else \
                        f"not {opts.max_k}-inductive; no counterexample within {opts.bmc_depth} steps"
                    out[prop.name] = Result(prop.name, prop.kind, UNKNOWN, f.method, time.perf_counter() - start,
                                            prop.rule, detail=detail)
        return out

    def _settled(self, out: dict[str, Result], prop: Property, found: Finding, start: float) -> Result | None:
        """Record ``found`` for ``prop`` if it refutes or proves it; None if it does neither."""
        seconds = time.perf_counter() - start
        if found.trace is not None:
            out[prop.name] = Result(prop.name, prop.kind, REFUTED, found.method, seconds, prop.rule, trace=found.trace)
        elif found.exhaustive:
            out[prop.name] = Result(prop.name, prop.kind, PROVED, found.method, seconds, prop.rule)
        return out.get(prop.name)

    def k_induct(self, props: list[Property], proved: list[Property], searched: int) -> dict[str, Result]:
        """k-induction for k = 2..max_k, first for the conjunction of ``props`` (each assumed along the
        path: stronger hypotheses), then for each alone; its base case (no violation within k - 1
        steps) is the depth already searched exhaustively.  Only what it proves is returned."""
        out: dict[str, Result] = {}
        start = time.perf_counter()
        ks = range(2, min(self.options.max_k, searched + 1) + 1)
        try:
            for k in ks:
                self.progress(f"{len(props)} properties together: {k}-induction")
                if self.induction.k_induction_all(props, proved, k):
                    for p in props:
                        out[p.name] = Result(p.name, p.kind, PROVED, f"{k}-induction", time.perf_counter() - start,
                                             p.rule)
                    return out
            if len(props) == 1:
                return out
            for prop in props:
                for k in ks:
                    self.progress(f"{prop.name}: {k}-induction")
                    if self.induction.k_induction(prop, proved, k):
                        out[prop.name] = Result(prop.name, prop.kind, PROVED, f"{k}-induction",
                                                time.perf_counter() - start, prop.rule)
                        break
        except Unknown as exc:
            for p in props:
                out.setdefault(p.name, self._unknown(p, "k-induction", time.perf_counter() - start, exc))
        return out

    def _unknown(self, prop: Property, method: str, seconds: float, exc: Unknown) -> Result:
        return Result(prop.name, prop.kind, UNKNOWN, method, seconds, prop.rule, detail=_why(exc))

    # -- diversion and layouts -------------------------------------------------------------------
    def check_partition(self, proved: list[Property]) -> list[Result]:
        """The recovery-path partition (rule: diversion)."""
        out: list[Result] = []
        try:
            obligations = Partition(self.ts, self.options.limits, proved).obligations()
        except Unknown as exc:  # building its terms ran past the deadline
            return [Result("recovery partition", "partition", UNKNOWN, "smt", 0.0, "diversion", detail=_why(exc))]
        while True:
            start = time.perf_counter()
            try:
                ob = next(obligations)
            except StopIteration:
                return out
            except Unknown as exc:
                out.append(Result("recovery partition", "partition", UNKNOWN, "smt", 0.0, "diversion",
                                  detail=_why(exc)))
                return out
            seconds = time.perf_counter() - start
            if ob.holds:
                out.append(Result(ob.name, "partition", PROVED, "smt", seconds, "diversion", ob.description))
            else:
                where = f"p={ob.page}, pos={ob.pos}"
                out.append(Result(ob.name, "partition", REFUTED, "smt", seconds, "diversion",
                                  f"{ob.description}  (witness at {where})", witness=ob.witness))

    def check_layouts(self) -> list[Result]:
        """Alignment, bounds and overlap of every declared layout."""
        out: list[Result] = []
        for layout in self.spec.layouts:
            try:
                for ob, seconds in _timed_iter(layout_obligations(layout, self.options.limits)):
                    status = PROVED if ob.holds else REFUTED
                    detail = "" if ob.holds else f"entry ids {ob.witness}"
                    out.append(Result(ob.name, "layout", status, "bit-vector", seconds, None, detail,
                                      witness=ob.witness))
            except Unknown as exc:
                out.append(Result(layout.name, "layout", UNKNOWN, "bit-vector", 0.0, None, _why(exc)))
        return out

    def bounded_search(self) -> SearchResult:
        """Bounded search over all invariant and step properties together, timed on its own."""
        props = [p for p in self.spec.properties if p.kind != "lemma"]
        start = time.perf_counter()
        try:
            trace = search_all(self.ts, props, self.options.search_depth, self.options.limits, self.progress)
        except Unknown:
            return SearchResult(self.options.search_depth, UNKNOWN, time.perf_counter() - start)
        status = REFUTED if trace else PROVED
        return SearchResult(self.options.search_depth, status, time.perf_counter() - start, trace)


def _why(exc: Unknown) -> str:
    """Why an obligation is UNKNOWN: the deadline, or Z3's own reason."""
    return exc.reason if isinstance(exc, DeadlineExpired) else f"z3: {exc.reason}"


def _timed_iter(it: Any) -> Any:
    while True:
        start = time.perf_counter()
        try:
            item = next(it)
        except StopIteration:
            return
        yield item, time.perf_counter() - start
