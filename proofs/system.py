"""The spec as a symbolic transition system: ``Init(s)``, ``Domain(s)``, ``T(s, s')``.

Each step of an unrolling gets a fresh copy of every state slot plus a selector naming the event
and page that fired, so a model reads back as a trace.  Pages are grounded: the relation is a
disjunction over events and pages; event params stay symbolic, bounded by their ranges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import z3

from morphcache.spec.model import PAGE, Event, Property, Spec

from .terms import State, Terms, slot


@dataclass(frozen=True)
class Action:
    """One grounded disjunct of the transition relation: an event at a page (None for system)."""

    code: int
    event: Event
    page: int | None


class TransitionSystem:
    """Init, domain and transition relation of a spec instance, plus property encodings."""

    def __init__(self, spec: Spec, constants: Mapping[str, int] | None = None) -> None:
        self.spec = spec
        self.terms = Terms(spec, constants)
        self.slots: list[tuple[str, str, int | None]] = []  # (slot, kind, page)
        for name, decl in spec.vars.items():
            for page in self._pages(decl.scope):
                self.slots.append((slot(name, page), decl.type, page))
        for name, obj in spec.objects.items():
            for page in self._pages(obj.scope):
                self.slots.append((slot(name, page), "state", page))
        self.actions = [
            Action(i, ev, page)
            for i, (ev, page) in enumerate((ev, pg) for ev in spec.events for pg in self._pages(ev.scope))
        ]

    def _pages(self, scope: str) -> list[int | None]:
        return list(range(self.spec.pages)) if scope == PAGE else [None]

    # -- states --------------------------------------------------------------------------------
    def state(self, tag: str) -> dict[str, Any]:
        """Fresh Z3 constants for every slot, suffixed by ``tag``; the action selector is ``@action``."""
        s: dict[str, Any] = {}
        for name, kind, _ in self.slots:
            s[name] = z3.Bool(f"{name}@{tag}") if kind == "bool" else z3.Int(f"{name}@{tag}")
        s["@action"] = z3.Int(f"action@{tag}")
        for ev in self.spec.events:
            for prm in ev.params:
                s[f"@{ev.name}.{prm.name}"] = z3.Int(f"{ev.name}.{prm.name}@{tag}")
        return s

    def _base(self, name: str) -> str:
        return name.split("[", 1)[0]

    def init(self, s: State) -> Any:
        """Every variable at its ``init``, every object in its ``initial`` state."""
        parts = []
        for name, _kind, _ in self.slots:
            base = self._base(name)
            if base in self.spec.objects:
                obj = self.spec.objects[base]
                parts.append(s[name] == obj.states.index(obj.initial))
            else:
                init = self.spec.vars[base].init
                parts.append(s[name] == (z3.BoolVal(init) if isinstance(init, bool) else z3.IntVal(init)))
        return z3.And(parts)

    def domain(self, s: State) -> Any:
        """Every integer within its declared bounds, every object state a valid index."""
        parts = []
        for name, kind, _ in self.slots:
            base = self._base(name)
            if kind == "state":
                parts += [s[name] >= 0, s[name] < len(self.spec.objects[base].states)]
            elif kind == "int":
                decl = self.spec.vars[base]
                if decl.min_expr is not None:
                    parts.append(s[name] >= self.terms.term(decl.min_expr, s, {}))
                if decl.max_expr is not None:
                    parts.append(s[name] <= self.terms.term(decl.max_expr, s, {}))
        return z3.And(parts)

    # -- transitions ---------------------------------------------------------------------------
    def env(self, action: Action, s: State) -> dict[str, Any]:
        """Names bound while firing ``action``: the page ``p`` and the event's params."""
        env: dict[str, Any] = {} if action.page is None else {"p": action.page}
        for prm in action.event.params:
            env[prm.name] = s[f"@{action.event.name}.{prm.name}"]
        return env

    def enabled(self, action: Action, s: State) -> Any:
        """Source state, params in range and guard: the action may fire in ``s``."""
        ev = action.event
        owner = slot(ev.owner, action.page)
        env = self.env(action, s)
        src = z3.Or([s[owner] == self.spec.objects[ev.owner].states.index(x) for x in ev.sources])
        params = [z3.And(env[p.name] >= p.min, env[p.name] <= p.max) for p in ev.params]
        return z3.And(src, *params, self.terms.term(ev.guard, s, env))

    def updates(self, action: Action, s: State) -> dict[str, Any]:
        """The post-state value of every slot the action writes (target state and effects)."""
        ev = action.event
        env = self.env(action, s)
        out = {slot(ev.owner, action.page): z3.IntVal(self.spec.objects[ev.owner].states.index(ev.target))}
        for eff in ev.effects:
            obj = eff.target if eff.target in self.spec.objects else None
            if eff.index == "*":
                for q in range(self.spec.pages):
                    out[slot(eff.target, q)] = self.terms.term(eff.value, s, {**env, "q": q}, obj)
            else:
                page = action.page if eff.index == "p" else None
                out[slot(eff.target, page)] = self.terms.term(eff.value, s, env, obj)
        return out

    def fire(self, action: Action, s: State, t: State) -> Any:
        """``s -> t`` by ``action``: enabled, written slots updated, all others unchanged."""
        writes = self.updates(action, s)
        frame = [t[name] == writes.get(name, s[name]) for name, _, _ in self.slots]
        return z3.And(s["@action"] == action.code, self.enabled(action, s), *frame)

    def trans(self, s: State, t: State) -> Any:
        """``T(s, t)``: some action fires and ``t`` stays in the domain."""
        return z3.And(z3.Or([self.fire(a, s, t) for a in self.actions]), self.domain(t))

    # -- properties ----------------------------------------------------------------------------
    def holds(self, prop: Property, s: State) -> Any:
        """The property as a predicate on one state (step properties: for every enabling of the event)."""
        if prop.kind != "step":
            return self.terms.term(prop.expr, s, {})
        parts = []
        for action in self.actions:
            if action.event.name != prop.event:
                continue
            env = self.env(action, s)
            writes = self.updates(action, s)
            succ = dict(s)
            succ.update(writes)
            cond = z3.Implies(z3.And(self.enabled(action, s), self.domain(succ)),
                              self.terms.term(prop.expr, s, env))
            params = [env[p.name] for p in action.event.params]
            parts.append(z3.ForAll(params, cond) if params else cond)
        return z3.And(parts)
