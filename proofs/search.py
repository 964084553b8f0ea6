"""The counterexample search of ``check``: explicit states first, bounded model checking after.

The properties induction could not prove are grouped by cone of influence (:mod:`proofs.slicing`)
and each group is searched on its slice, in two phases the checker runs in turn:

1. :meth:`CounterexampleSearch.explicit`: breadth-first over explicit states (:mod:`proofs.explicit`)
   until a state budget runs out; every depth it completes is searched exhaustively, and a violation
   found there is a shortest one.  If it runs out of new states first, it has visited every
   reachable state of the instance: the properties it did not refute hold in all of them;
2. :meth:`CounterexampleSearch.bounded`: from the first depth the explicit search did not complete,
   bounded model checking (:mod:`proofs.bmc`) on the same slice, assuming the invariants already
   proved that the slice can express.

The checker tries k-induction between the two (its base case is the depth searched explicitly).  A
trace found on a slice is replayed on the whole system (every event of a slice fires exactly as in
the whole system), so the report shows complete states.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from morphcache.spec.model import Property, Spec

from .bfs import ExplicitSearch
from .bmc import BoundedSearch
from .explicit import ExplicitSystem
from .induction import SolverLimits, Unknown
from .slicing import Slice, cone, property_reads
from .system import TransitionSystem
from .trace import Step, Trace, failing_conjuncts

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SearchOptions:
    """How deep and how wide to search."""

    max_depth: int = 16
    explicit_states: int = 150_000  # states the explicit search may visit per group before BMC takes over
    bmc_seconds: float | None = 20.0  # wall-clock budget of each group's bounded model checking
    limits: SolverLimits = field(default_factory=SolverLimits)
    constants: Mapping[str, int] | None = None


@dataclass(frozen=True)
class Finding:
    """What the search knows about one property: a shortest trace and the method that found it, or
    the depth to which it holds (``exhaustive``: in every reachable state), or why it stopped."""

    trace: Trace | None
    method: str
    depth: int
    exhaustive: bool = False
    unknown: str = ""


class CounterexampleSearch:
    """Shortest counterexamples for properties of one spec instance, one slice per group."""

    def __init__(self, spec: Spec, options: SearchOptions, proved: list[Property],
                 progress: Progress | None = None) -> None:
        self.spec = spec
        self.options = options
        self.proved = proved
        self.progress = progress or (lambda _msg: None)
        self._full: ExplicitSystem | None = None

    def groups(self, props: list[Property]) -> list[tuple[Slice, list[Property]]]:
        """``props`` grouped by cone of influence, smallest cone first."""
        out: dict[Slice, list[Property]] = {}
        for prop in props:
            out.setdefault(cone(self.spec, [prop], self.options.constants), []).append(prop)
        return sorted(out.items(), key=lambda item: len(item[0].names))

    def covers(self, keep: Slice, prop: Property) -> bool:
        """Whether ``prop`` can be decided on the slice ``keep`` (all it reads is kept: the slice, a
        closed set, then contains its whole cone)."""
        return property_reads(self.spec, prop) <= keep.names and \
            (prop.kind != "step" or str(prop.event) in keep.events)

    def slice_system(self, keep: Slice) -> tuple[TransitionSystem, list[Property]]:
        """The slice's transition system and the proved invariants it can express."""
        ts = TransitionSystem(self.spec, self.options.constants, keep)
        return ts, [a for a in self.proved if property_reads(self.spec, a) <= keep.names]

    def explicit(self, keep: Slice, props: list[Property]) -> dict[str, Finding]:
        """Phase 1: breadth-first search of the slice within the state budget."""
        opts = self.options
        start = time.perf_counter()
        outcome = ExplicitSearch(ExplicitSystem(self.spec, opts.constants, keep)).search(
            props, opts.max_depth, opts.explicit_states)
        self.progress(f"explicit: {', '.join(p.name for p in props)}: depth {outcome.depth}, "
                      f"{outcome.states} states, {time.perf_counter() - start:.2f} s")
        out: dict[str, Finding] = {}
        for prop in props:
            trace = outcome.traces.get(prop.name)
            if trace is not None:
                out[prop.name] = Finding(self.replay(trace, prop), f"explicit-state (shortest, {trace.length} steps)",
                                         trace.length)
            elif outcome.complete:
                out[prop.name] = Finding(None, f"explicit-state (all {outcome.states} reachable states)",
                                         opts.max_depth, exhaustive=True)
            else:
                out[prop.name] = Finding(None, "explicit-state", outcome.depth)
        return out

    def bounded(self, keep: Slice, props: list[Property], start: int) -> dict[str, Finding]:
        """Phase 2: bounded model checking of the slice from depth ``start`` (shallower depths are
        known to be free of violations)."""
        ts, assumed = self.slice_system(keep)
        out: dict[str, Finding] = {}
        try:
            bmc = BoundedSearch(ts, self.options.limits, assumed)
            traces = bmc.run(props, self.options.max_depth, start, self.progress, seconds=self.options.bmc_seconds)
        except Unknown as exc:
            return {p.name: Finding(None, "bmc", start - 1, unknown=exc.reason) for p in props}
        for p in props:
            trace = traces.get(p.name)
            out[p.name] = Finding(self.replay(trace, p), f"bmc (shortest, {trace.length} steps)", trace.length) \
                if trace is not None else Finding(None, "bmc", self.options.max_depth)
        return out

    def replay(self, trace: Trace, prop: Property) -> Trace:
        """The trace with every state completed on the whole system."""
        if self._full is None:
            self._full = ExplicitSystem(self.spec, self.options.constants)
        full = self._full
        st = full.initial
        steps: list[Step] = []
        prev: dict[str, Any] | None = None
        for step in trace.steps:
            if step.event is not None:
                nxt = full.fire(st, step.event, step.args)
                if nxt is None:
                    raise AssertionError(f"a trace found on a slice does not replay: step {step.index} {step.event}")
                st = nxt
            state = full.as_dict(st)
            changed = {} if prev is None else {k: (prev[k], v) for k, v in state.items() if prev[k] != v}
            steps.append(Step(step.index, step.event, dict(step.args), state, changed))
            prev = state
        return Trace(trace.property_name, tuple(steps), failing_conjuncts(self.spec, prop, steps))
