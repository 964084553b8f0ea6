"""The spec as a symbolic transition system: ``Init(s)``, ``Domain(s)``, ``T(s, s')``.

Each step of an unrolling gets a fresh copy of every state slot plus a selector naming the event,
reader and page that fired, so a model reads back as a trace.  Readers and pages are grounded: the
relation is a disjunction over events and their ``(r, p)`` arguments; event params stay symbolic,
bounded by their ranges.  Environment events are part of the relation like any other.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import z3

from morphcache.spec.model import SCOPE_ARGS, Event, Property, Spec

from .slicing import Slice
from .terms import State, Terms, slot, slot_args


@dataclass(frozen=True)
class Action:
    """One grounded disjunct of the transition relation: an event for a reader at a page (None where
    the event takes no such argument)."""

    code: int
    event: Event
    page: int | None
    reader: int | None = None

    @property
    def args(self) -> dict[str, int]:
        """The grounded arguments, ``{"r": .., "p": ..}`` as the event takes them."""
        out = {}
        if self.reader is not None:
            out["r"] = self.reader
        if self.page is not None:
            out["p"] = self.page
        return out

    def label(self) -> str:
        """``open(r=0, p=1)``."""
        return f"{self.event.name}({', '.join(f'{k}={v}' for k, v in self.args.items())})"


class TransitionSystem:
    """Init, domain and transition relation of a spec instance, plus property encodings."""

    def __init__(self, spec: Spec, constants: Mapping[str, int] | None = None, keep: Slice | None = None) -> None:
        self.spec = spec
        self.keep = keep
        self.terms = Terms(spec, constants)
        self.slots: list[tuple[str, str, int | None]] = []  # (slot, kind, page)
        kinds = [(name, decl.type) for name, decl in spec.vars.items()]
        kinds += [(name, "state") for name in spec.objects]
        if keep is not None:  # a cone of influence: only what the searched properties depend on
            kinds = [(name, kind) for name, kind in kinds if name in keep.names]
        for name, kind in kinds:
            for reader, page in slot_args(spec, name):
                self.slots.append((slot(name, page, reader), kind, page))
        self._holds: dict[tuple[int, int], tuple[State, Property, Any]] = {}
        self._first: dict[int, tuple[State, Property, Any]] = {}
        self._renamings: dict[tuple[tuple[int, int], ...], tuple[Any, int, Any, Any]] = {}
        events = [ev for ev in spec.events if keep is None or ev.name in keep.events]
        grounded = [(ev, r, p) for ev in events for r, p in self._groundings(ev)]
        self.actions = [Action(i, ev, p, r) for i, (ev, r, p) in enumerate(grounded)]

    def _groundings(self, ev: Event) -> list[tuple[int | None, int | None]]:
        readers: list[int | None] = list(self.spec.reader_range()) if ev.takes_reader else [None]
        pages: list[int | None] = list(self.spec.page_range()) if ev.takes_page else [None]
        return [(r, p) for r in readers for p in pages]

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
        """Names bound while firing ``action``: the reader ``r``, the page ``p`` and the event's params."""
        env: dict[str, Any] = dict(action.args)
        for prm in action.event.params:
            env[prm.name] = s[f"@{action.event.name}.{prm.name}"]
        return env

    def _param_bound(self, expr: Any, folded: int, s: State) -> Any:
        """A param's bound at this system's constants (as written), else the folded value."""
        return self.terms.term(expr, s, {}) if expr is not None else folded

    def enabled(self, action: Action, s: State) -> Any:
        """Source state, params in range and guard: the action may fire in ``s``."""
        ev = action.event
        owner = self._owner_slot(action)
        env = self.env(action, s)
        src = z3.Or([s[owner] == self.spec.objects[ev.owner].states.index(x) for x in ev.sources])
        params = [z3.And(env[p.name] >= self._param_bound(p.min_expr, p.min, s),
                         env[p.name] <= self._param_bound(p.max_expr, p.max, s)) for p in ev.params]
        return z3.And(src, *params, self.terms.term(ev.guard, s, env))

    def _owner_slot(self, action: Action) -> str:
        ev = action.event
        dims = SCOPE_ARGS[ev.scope]
        return slot(ev.owner, action.page if "p" in dims else None, action.reader if "r" in dims else None)

    def updates(self, action: Action, s: State) -> dict[str, Any]:
        """The post-state value of every slot the action writes (target state and effects)."""
        ev = action.event
        env = self.env(action, s)
        out = {self._owner_slot(action): z3.IntVal(self.spec.objects[ev.owner].states.index(ev.target))}
        for eff in ev.effects:
            if self.keep is not None and eff.target not in self.keep.names:
                continue
            obj = eff.target if eff.target in self.spec.objects else None
            for reader, page, bound in self._effect_slots(eff.index, eff.target, action):
                out[slot(eff.target, page, reader)] = self.terms.term(eff.value, s, {**env, **bound}, obj)
        return out

    def _effect_slots(self, index: str | None, target: str, action: Action
                      ) -> list[tuple[int | None, int | None, dict[str, int]]]:
        """``(reader, page, names bound)`` of every slot an effect written ``target[index]`` assigns."""
        if index is None:
            return [(None, None, {})]
        dims = SCOPE_ARGS[self.spec.scope_of(target)]
        choices: list[list[tuple[str, int | None, str | None]]] = []
        for dim, part in zip(dims, index.split(","), strict=True):
            size = self.spec.readers if dim == "r" else self.spec.pages
            star = "s" if dim == "r" else "q"
            if part == "*":
                choices.append([(dim, i, star) for i in range(size)])
            else:
                choices.append([(dim, action.reader if dim == "r" else action.page, None)])
        out: list[tuple[int | None, int | None, dict[str, int]]] = []
        for combo in itertools.product(*choices):
            at = {dim: i for dim, i, _ in combo}
            bound = {star: i for _, i, star in combo if star is not None and i is not None}
            out.append((at.get("r"), at.get("p"), bound))
        return out

    def fire(self, action: Action, s: State, t: State) -> Any:
        """``s -> t`` by ``action``: enabled, written slots updated, all others unchanged."""
        writes = self.updates(action, s)
        frame = [t[name] == writes.get(name, s[name]) for name, _, _ in self.slots]
        return z3.And(s["@action"] == action.code, self.enabled(action, s), *frame)

    def trans(self, s: State, t: State) -> Any:
        """``T(s, t)``: the action ``s["@action"]`` is enabled in ``s``, ``t`` is its result, and ``t``
        stays in the domain.

        Encoded per slot rather than per action: each slot of ``t`` is an ``If`` chain over the actions
        that write it (everything else keeps its value), so the relation has one equality per slot
        instead of one frame condition per action and slot.  Equivalent to ``Or(fire(a, s, t))``.
        """
        sel = s["@action"]
        parts = [sel >= 0, sel < len(self.actions)]
        writers: dict[str, list[tuple[int, Any]]] = {}
        for action in self.actions:
            parts.append(z3.Implies(sel == action.code, self.enabled(action, s)))
            for name, value in self.updates(action, s).items():
                writers.setdefault(name, []).append((action.code, value))
        for name, _, _ in self.slots:
            value = s[name]
            for code, written in writers.get(name, []):
                value = z3.If(sel == code, written, value)
            parts.append(t[name] == value)
        parts.append(self.domain(t))
        return z3.And(parts)

    def keys(self, s: State) -> list[Any]:
        """The Z3 constants of ``s`` (slots, action selector, event params), in a fixed order: pairs of
        ``keys(a)`` and ``keys(b)`` rename a formula over ``a`` into one over ``b`` with ``z3.substitute``."""
        out = [s[name] for name, _, _ in self.slots] + [s["@action"]]
        out += [s[f"@{ev.name}.{prm.name}"] for ev in self.spec.events for prm in ev.params]
        return out

    def rename(self, formula: Any, *pairs: tuple[State, State]) -> Any:
        """``formula`` with the constants of each ``(old, new)`` state pair replaced (the substitution's
        C arrays are built once per pair of states and reused)."""
        key = tuple((id(old), id(new)) for old, new in pairs)
        hit = self._renamings.get(key)
        if hit is None:
            olds = [a for old, _ in pairs for a in self.keys(old)]
            news = [b for _, new in pairs for b in self.keys(new)]
            n = len(olds)
            src, dst = (z3.Ast * n)(), (z3.Ast * n)()
            for i, (a, b) in enumerate(zip(olds, news, strict=True)):
                src[i], dst[i] = a.as_ast(), b.as_ast()
            hit = (pairs, n, src, dst)  # the states are kept alive, so their ids stay theirs
            self._renamings[key] = hit
        _, n, src, dst = hit
        if n == 0:
            return formula
        return z3.z3._to_expr_ref(z3.Z3_substitute(formula.ctx_ref(), formula.as_ast(), n, src, dst), formula.ctx)

    # -- properties ----------------------------------------------------------------------------
    def holds(self, prop: Property, s: State) -> Any:
        """The property as a predicate on one state (step properties: for every enabling of the event).

        Memoised per property and state: induction, BMC and the partition ask for the same terms often.
        """
        key = (id(prop), id(s))
        hit = self._holds.get(key)
        if hit is None or hit[0] is not s or hit[1] is not prop:
            first = self._first.get(id(prop))
            if first is not None and first[1] is prop:
                term = self.rename(first[2], (first[0], s))  # renaming is much cheaper than encoding again
            else:
                term = self._holds_term(prop, s)
                self._first[id(prop)] = (s, prop, term)
            hit = (s, prop, term)
            self._holds[key] = hit
        return hit[2]

    def _holds_term(self, prop: Property, s: State) -> Any:
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

