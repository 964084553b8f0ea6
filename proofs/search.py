"""The counterexample search of ``check``: explicit-state first, bounded model checking after.

For the properties induction could not prove, each group of properties with the same cone of
influence (:mod:`proofs.slicing`) is searched on its slice:

1. breadth-first over explicit states (:mod:`proofs.explicit`) until a state budget runs out; every
   depth it completes is searched exhaustively, and a violation found there is a shortest one;
2. from the first depth it did not complete, bounded model checking (:mod:`proofs.bmc`) on the same
   slice, assuming the invariants already proved that the slice can express.

A trace found on a slice is replayed on the whole system (every event of a slice fires exactly as
in the whole system), so the report shows complete states.  If the explicit search runs out of new
states before the depth limit, it has visited every reachable state of the instance: the properties
it did not refute hold in all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from morphcache.spec.model import Property, Spec

from .bmc import BoundedSearch
from .explicit import ExplicitSearch, ExplicitSystem
from .induction import SolverLimits
from .slicing import Slice, cone, property_reads
from .system import TransitionSystem
from .trace import Step, Trace, failing_conjuncts

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SearchOptions:
    """How deep and how wide to search."""

    max_depth: int = 16
    explicit_states: int = 60_000  # states the explicit search may visit per group before BMC takes over
    limits: SolverLimits = field(default_factory=SolverLimits)
    constants: Mapping[str, int] | None = None


@dataclass(frozen=True)
class Finding:
    """The outcome for one property: a shortest trace and the method that found it, or the depth to
    which it is known to hold (``exhaustive``: in every reachable state)."""

    trace: Trace | None
    method: str
    depth: int
    exhaustive: bool = False


class CounterexampleSearch:
    """Shortest counterexamples for a set of properties of one spec instance."""

    def __init__(self, spec: Spec, options: SearchOptions, proved: list[Property],
                 progress: Progress | None = None) -> None:
        self.spec = spec
        self.options = options
        self.proved = proved
        self.progress = progress or (lambda _msg: None)
        self._full: ExplicitSystem | None = None

    def run(self, props: list[Property]) -> dict[str, Finding]:
        """A :class:`Finding` for every property of ``props``."""
        groups: dict[Slice, list[Property]] = {}
        for prop in props:
            groups.setdefault(cone(self.spec, [prop], self.options.constants), []).append(prop)
        out: dict[str, Finding] = {}
        for keep, group in sorted(groups.items(), key=lambda item: len(item[0].names)):
            out.update(self._group(keep, group))
        return out

    def _group(self, keep: Slice, props: list[Property]) -> dict[str, Finding]:
        names = ", ".join(p.name for p in props)
        opts = self.options
        start = time.perf_counter()
        explicit = ExplicitSystem(self.spec, opts.constants, keep)
        outcome = ExplicitSearch(explicit).search(props, opts.max_depth, opts.explicit_states)
        self.progress(f"explicit: {names}: depth {outcome.depth}, {outcome.states} states, "
                      f"{time.perf_counter() - start:.2f} s")
        out: dict[str, Finding] = {}
        by_name = {p.name: p for p in props}
        for name, trace in outcome.traces.items():
            out[name] = Finding(self._replay(trace, by_name[name]), f"explicit-state (shortest, {trace.length} steps)",
                                trace.length)
        rest = [p for p in props if p.name not in out]
        if not rest:
            return out
        if outcome.complete:
            for p in rest:
                out[p.name] = Finding(None, f"explicit-state ({outcome.states} reachable states)", opts.max_depth, True)
            return out
        if outcome.depth >= opts.max_depth:
            return out | {p.name: Finding(None, "explicit-state", opts.max_depth) for p in rest}
        ts = TransitionSystem(self.spec, opts.constants, keep)
        assumed = [a for a in self.proved if property_reads(self.spec, a) <= keep.names]
        bmc = BoundedSearch(ts, opts.limits, assumed)
        traces = bmc.run(rest, opts.max_depth, outcome.depth + 1, self.progress)
        for p in rest:
            trace = traces.get(p.name)
            out[p.name] = Finding(self._replay(trace, p), f"bmc (shortest, {trace.length} steps)", trace.length) \
                if trace is not None else Finding(None, "bmc", opts.max_depth)
        return out

    def _replay(self, trace: Trace, prop: Property) -> Trace:
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
