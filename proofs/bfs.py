"""Explicit-state search: breadth-first over the concrete states of the checked instance.

The instance is small (a few pages and readers, small constants), so its states can be enumerated
one by one (:mod:`proofs.explicit` compiles it to Python).  Breadth-first order makes the first
violation found at each depth a shortest one, with no solver involved.  States symmetric to one
already seen (:mod:`proofs.symmetry`) are skipped; distances and violations are the same for all of
them, and the traces kept are concrete, not canonical.

The search stops at a depth or a state budget and reports how deep it looked exhaustively: the
bounded model checker continues from there.  If it runs out of new states first, it has visited
every reachable state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from morphcache.spec.model import Property

from .explicit import ExplicitSystem
from .trace import Step, Trace, failing_conjuncts


@dataclass(frozen=True)
class SearchOutcome:
    """What a search found: a shortest trace per violated property, and the depth searched exhaustively
    (every state within ``depth`` steps was checked; -1 if not even the initial state)."""

    traces: dict[str, Trace]
    depth: int
    states: int
    seconds: float
    complete: bool = False  # every reachable state was visited


class ExplicitSearch:
    """Breadth-first search for shortest violations of a set of properties."""

    def __init__(self, system: ExplicitSystem) -> None:
        self.system = system

    def search(self, props: list[Property], max_depth: int, max_states: int = 200_000,
               seconds: float | None = None) -> SearchOutcome:
        """Shortest violating traces of ``props`` within ``max_depth`` steps, exploring at most
        ``max_states`` states (and about ``seconds``); a level is either searched whole or not counted."""
        start = time.perf_counter()
        sys_ = self.system
        checks = [(p, sys_.check(p)) for p in props]
        found: dict[str, Trace] = {}
        root: tuple[Any, ...] = (sys_.initial, None, -1)  # (state, parent node, action code)
        canonical = sys_.canonical
        seen = {canonical(sys_.initial)}
        raw = {sys_.initial}
        level = [root]
        depth = -1
        for d in range(max_depth + 1):
            for node in level:
                for prop, holds in checks:
                    if prop.name not in found and not holds(node[0]):
                        found[prop.name] = self._trace(prop, node)
            depth = d
            if len(found) == len(props) or d == max_depth:
                break
            nxt: list[tuple[Any, ...]] = []
            for node in level:
                for code, succ in sys_.successors(node[0]):
                    if succ in raw:  # the same concrete state again (a diamond): no need to canonicalise
                        continue
                    raw.add(succ)
                    key = canonical(succ)
                    if key not in seen:
                        seen.add(key)
                        nxt.append((succ, node, code))
                if len(seen) > max_states or (seconds is not None and time.perf_counter() - start > seconds):
                    return SearchOutcome(found, depth, len(seen), time.perf_counter() - start)
            if not nxt:  # every reachable state has been checked
                return SearchOutcome(found, max_depth, len(seen), time.perf_counter() - start, True)
            level = nxt
        return SearchOutcome(found, depth, len(seen), time.perf_counter() - start)

    def _trace(self, prop: Property, node: tuple[Any, ...]) -> Trace:
        chain = []
        while node is not None:
            chain.append(node)
            node = node[1]
        chain.reverse()
        steps: list[Step] = []
        prev: dict[str, Any] | None = None
        for i, (st, _, code) in enumerate(chain):
            state = self.system.as_dict(st)
            event, args = (None, {}) if code < 0 else (self.system.actions[code].event.name,
                                                       dict(self.system.actions[code].args))
            changed = {} if prev is None else {k: (prev[k], v) for k, v in state.items() if prev[k] != v}
            steps.append(Step(i, event, args, state, changed))
            prev = state
        return Trace(prop.name, tuple(steps), failing_conjuncts(self.system.spec, prop, steps))
