"""Compile a Spec into the closures the runtime executes (all through ``spec.interp.compile_expr``).

Each page event gets a *mode* that says where its guard and effects are evaluated:

- ``local``: guard and effects read only the event's own page (``x[p]``), so they have one value
  whatever the sequence; evaluated once on the page (``acquire``, ``offload``, ``land`` ...).
- ``global``: the guard reduces over pages (``sum(... for q in pages)`` in ``admit``).  The reuse
  pool is shared by every sequence, so the reduction ranges over *every page of the manager*; page
  reductions whose body reads only ``x[q]`` are maintained incrementally as aggregates.
- ``view``: the guard or an effect reads a sequence's system state (``frontier``, ``graph``) or uses
  ``p`` arithmetically; evaluated in the view of every live sequence that holds the page (``open``,
  ``append``, ``seal``, ``slide``, ``prefetch``, ``recompute``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from morphcache.spec.expr import Const, Expr, Name, Reduce, conjuncts, render
from morphcache.spec.interp import Compiled, compile_expr
from morphcache.spec.model import PAGE, Event, Param, Property, Spec

from .bounds import declared_bounds
from .errors import ConfigError
from .irtools import (
    array_names,
    fold,
    free_names,
    has_reduce,
    page_local,
    redirect_pages,
    replace_reductions,
)

LOCAL, GLOBAL, VIEW, SYSTEM = "local", "global", "view", "system"
PID = "@pid"  # the physical page id, bound next to the block index p for direct evaluation


@dataclass(frozen=True)
class Conjunct:
    """One top-level conjunct of a guard: its text, its closure and the names it reads."""

    text: str
    fn: Compiled
    reads: frozenset[str]


@dataclass(frozen=True)
class CompiledEffect:
    """``target[index] := value``; ``system`` when the target is a system variable or object."""

    target: str
    index: str | None
    fn: Compiled
    text: str
    system: bool
    lo: Compiled | int | None  # an int when the bound is a constant
    hi: Compiled | int | None


@dataclass(frozen=True)
class Aggregate:
    """A page reduction maintained over every page: ``kind`` of ``body`` for ``var`` in pages."""

    name: str
    kind: str
    var: str
    body: Compiled
    text: str
    reads: frozenset[str]


@dataclass(frozen=True)
class CompiledProperty:
    """A property compiled to a closure; ``system_free`` when it reads no system state."""

    prop: Property
    fn: Compiled
    text: str
    system_free: bool
    body: Compiled | None  # the body of a top-level ``all(... for q in pages)``, for diagnostics
    var: str | None
    reads: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CompiledEvent:
    """Everything the runtime needs to fire one event."""

    event: Event
    name: str
    owner: str
    scope: str
    sources: frozenset[str]
    target: str
    mode: str
    guard: Compiled
    guard_text: str
    conjuncts: tuple[Conjunct, ...]
    effects: tuple[CompiledEffect, ...]
    params: tuple[Param, ...]
    aggregates: tuple[str, ...]
    steps: tuple[CompiledProperty, ...]
    reads: frozenset[str] = frozenset()  # per-page state the guard and effects read
    direct: bool = False  # view event compiled to read the page table at ``@pid`` (see redirect_pages)

    @property
    def writes(self) -> frozenset[str]:
        """Variables and object states this event can change (its owner included)."""
        return frozenset({self.owner, *(e.target for e in self.effects)})


@dataclass(frozen=True)
class CompiledLookup:
    """The lookup section: per object, needed(p, pos), ready(p) and each recovery path's condition."""

    objects: tuple[str, ...]
    needed: Mapping[str, Compiled]
    needed_reads_state: Mapping[str, bool]
    ready: Mapping[str, Compiled]
    ready_local: Mapping[str, bool]
    ready_text: Mapping[str, str]
    recovery: Mapping[str, Mapping[str, Compiled]]
    recovery_local: Mapping[str, bool]
    reads: frozenset[str]


class CompiledSpec:
    """A spec compiled with the runtime's constants."""

    def __init__(self, spec: Spec, constants: Mapping[str, int]) -> None:
        self.spec = spec
        self.constants = dict(constants)
        self.states = {name: obj.states for name, obj in spec.objects.items()}
        self.system_init: dict[str, object] = {}
        self.page_init: dict[str, object] = {}
        for name, decl in spec.vars.items():
            (self.page_init if decl.scope == PAGE else self.system_init)[name] = decl.init
        for name, obj in spec.objects.items():
            (self.page_init if obj.scope == PAGE else self.system_init)[name] = obj.initial
        self.system_names = frozenset(self.system_init)
        self.page_names = frozenset(self.page_init)
        self.aggregates: dict[str, Aggregate] = {}
        bounds = declared_bounds(spec)
        self.bounds: dict[str, tuple[Compiled | int | None, Compiled | int | None]] = {}
        for name, b in bounds.items():
            self.bounds[name] = (self._bound(b.lo), self._bound(b.hi))
        props = [self._property(p) for p in spec.properties]
        self.invariants = tuple(p for p in props if p.prop.kind in ("invariant", "lemma"))
        steps: dict[str, list[CompiledProperty]] = {}
        for p in props:
            if p.prop.kind == "step" and p.prop.event is not None:
                steps.setdefault(p.prop.event, []).append(p)
        self.events = {ev.name: self._event(ev, tuple(steps.get(ev.name, ()))) for ev in spec.events}
        self.lookup = self._lookup()

    # -- helpers ----------------------------------------------------------------------------------
    def _compile(self, e: Expr) -> Compiled:
        return compile_expr(fold(e, self.constants))

    def _bound(self, e: Expr | None) -> Compiled | int | None:
        if e is None:
            return None
        folded = fold(e, self.constants)
        if isinstance(folded, Const) and isinstance(folded.value, int) and not isinstance(folded.value, bool):
            return folded.value
        return compile_expr(folded)

    def _reads(self, e: Expr) -> frozenset[str]:
        return frozenset(free_names(e) | array_names(e))

    def _aggregate(self, r: Reduce) -> Name | None:
        if not page_local(r.body, r.var):
            return None
        text = render(r)
        for agg in self.aggregates.values():
            if agg.text == text:
                return Name(agg.name)
        name = f"@agg{len(self.aggregates)}"
        self.aggregates[name] = Aggregate(name, r.kind, r.var, compile_expr(r.body), text,
                                          frozenset(array_names(r.body)))
        return Name(name)

    def _property(self, prop: Property) -> CompiledProperty:
        e = fold(prop.expr, self.constants)
        system_free = not (free_names(e) & self.system_names)
        body = var = None
        if isinstance(e, Reduce) and e.kind == "all":
            body, var = compile_expr(e.body), e.var
        return CompiledProperty(prop, compile_expr(e), render(prop.expr), system_free, body, var,
                                self._reads(prop.expr))

    # -- events -----------------------------------------------------------------------------------
    def _event(self, ev: Event, steps: tuple[CompiledProperty, ...]) -> CompiledEvent:
        params = frozenset(prm.name for prm in ev.params)
        guard = fold(ev.guard, self.constants)
        effects = [(eff, fold(eff.value, self.constants)) for eff in ev.effects]
        aggs: tuple[str, ...] = ()
        if ev.scope != PAGE:
            mode = SYSTEM
        elif has_reduce(guard) or any(has_reduce(v) for _, v in effects):
            mode = GLOBAL
            guard = replace_reductions(guard, self._aggregate)
            effects = [(eff, replace_reductions(v, self._aggregate)) for eff, v in effects]
            aggs = tuple(sorted(free_names(guard) & set(self.aggregates)))
            allowed = params | set(self.aggregates)
            if not page_local(guard, "p", frozenset(allowed)) or not all(
                eff.index == "p" and page_local(v, "p", frozenset(allowed)) for eff, v in effects
            ):
                raise ConfigError(
                    f"event '{ev.name}': its guard reduces over pages and also reads a sequence's state; "
                    "the runtime cannot give it one global meaning"
                )
        else:
            local = page_local(guard, "p", params) and all(
                eff.index == "p" and page_local(v, "p", params) for eff, v in effects
            )
            mode = LOCAL if local else VIEW
        direct = False
        if mode == VIEW:
            moved = [redirect_pages(v, "p", PID) for _, v in effects]
            moved_guard = redirect_pages(guard, "p", PID)
            if moved_guard is not None and all(m is not None for m in moved) and all(
                    eff.index != "*" for eff, _ in effects):
                direct = True
                guard = moved_guard
                effects = [(eff, m) for (eff, _), m in zip(effects, moved, strict=True)]  # type: ignore[misc]
        parts = []
        for c in conjuncts(ev.guard):
            folded = fold(c, self.constants)
            if mode == GLOBAL:
                folded = replace_reductions(folded, self._aggregate)
            elif direct:
                folded = redirect_pages(folded, "p", PID) or folded
            parts.append(Conjunct(render(c), compile_expr(folded), self._reads(c)))
        ceffects = []
        for eff, value in effects:
            lo, hi = self.bounds.get(eff.target, (None, None))
            ceffects.append(CompiledEffect(eff.target, eff.index, compile_expr(value), render(eff.value),
                                           eff.target in self.system_names, lo, hi))
        reads = frozenset(array_names(guard).union(*(array_names(v) for _, v in effects)))
        return CompiledEvent(ev, ev.name, ev.owner, ev.scope, frozenset(ev.sources), ev.target, mode,
                             compile_expr(guard), render(ev.guard), tuple(parts), tuple(ceffects), ev.params,
                             aggs, steps, reads, direct)

    # -- lookup -----------------------------------------------------------------------------------
    def _lookup(self) -> CompiledLookup:
        lk = self.spec.lookup
        needed, needed_state, ready, ready_local, ready_text = {}, {}, {}, {}, {}
        recovery: dict[str, dict[str, Compiled]] = {}
        recovery_local: dict[str, bool] = {}
        reads: set[str] = set()
        for obj in lk.objects:
            n = fold(lk.needed[obj], self.constants)
            needed[obj] = compile_expr(n)
            needed_state[obj] = bool(array_names(n) or (free_names(n) - {"p", "pos"}))
            r = fold(lk.ready[obj], self.constants)
            ready[obj] = compile_expr(r)
            ready_local[obj] = page_local(r)
            ready_text[obj] = render(lk.ready[obj])
            reads |= array_names(r)
            paths = lk.recovery.get(obj, {})
            recovery[obj] = {path: self._compile(cond) for path, cond in paths.items()}
            recovery_local[obj] = all(page_local(fold(c, self.constants)) for c in paths.values())
        return CompiledLookup(lk.objects, needed, needed_state, ready, ready_local, ready_text, recovery,
                              recovery_local, frozenset(reads))

    def event(self, name: str) -> CompiledEvent:
        """The compiled event ``name``; ConfigError if the spec has none."""
        try:
            return self.events[name]
        except KeyError:
            raise ConfigError(f"the spec has no event '{name}'") from None
