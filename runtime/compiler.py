"""Compile a Spec into what the runtime executes: every guard, effect, predicate and invariant, each
as a closure (``spec.interp``) and as numpy operations (``spec.vector``), from the same expression.

Before compiling, each expression goes through the passes of ``irtools`` and ``domains``::

    spec expression --fold constants--> --observed ghosts as names--> --runtime domains-->
        --state names as codes--> compile_source (one Python function: the fast path)
                              compile_expr   (closures: the general path, fast=False)
                              compile_vector (numpy: batches)

Nothing is restated: a change to a guard in the spec file changes what the runtime does.  Ghost
variables are not compiled (the runtime keeps none); an effect that reads a ghost the event observes
reads the observation the caller hands in (``@obs_<ghost>``: ``verify`` measures ``intact``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

from morphcache.spec.expr import Const, Expr, Index, Name, Reduce, conjuncts, render, walk
from morphcache.spec.interp import Compiled, compile_expr
from morphcache.spec.model import PAGE, READER, READER_PAGE, SYSTEM, Event, Param, Property, Spec
from morphcache.spec.pycode import compile_source
from morphcache.spec.vector import VecCompiled, compile_vector

from .bounds import declared_bounds, param_at
from .domains import PAGE_READERS, READER_PAGES, Aggregate, Domain, DomainTable
from .errors import ConfigError
from .irtools import array_names, encode_states, fold, free_names, replace_index, replace_reductions
from .witness import Witness

OBS = "@obs_"  # names key prefix of an observed ghost's measured value
Bound: TypeAlias = Compiled | int | None


@dataclass(frozen=True)
class Conjunct:
    """One top-level conjunct of a guard: its text, closure, vector form and the names it reads."""

    text: str
    expr: Expr
    fn: Compiled  # generated source (the fast path)
    vfn: VecCompiled
    reads: frozenset[str]
    gfn: Compiled  # closures (the general path)
    witness: Witness | None = None  # an ``all(...)`` conjunct: the first id its body is false for


@dataclass(frozen=True)
class CompiledEffect:
    """``target[index] := value``; ``scope`` is the target's (page, reader or reader_page)."""

    target: str
    scope: str
    index: str
    text: str
    expr: Expr
    fn: Compiled
    vfn: VecCompiled
    lo: Bound
    hi: Bound
    star: Domain | None  # the range of a '*' in the index
    gfn: Compiled


@dataclass(frozen=True)
class CompiledEvent:
    """Everything the pipeline needs to fire one event."""

    event: Event
    name: str
    owner: str
    scope: str  # the owner's scope: which index holds its state
    sources: frozenset[int]
    target: int
    guard_text: str
    guard: Compiled
    vguard: VecCompiled
    conjuncts: tuple[Conjunct, ...]
    effects: tuple[CompiledEffect, ...]
    params: tuple[Param, ...]
    observes: tuple[str, ...]
    reads: frozenset[str]  # every name the guard and effects read (arrays, aggregates, domains)
    gguard: Compiled  # the guard as closures (the general path)
    steps: tuple[CompiledProperty, ...] = ()

    @property
    def writes(self) -> frozenset[str]:
        """Variables and object states the event can change (its owner included)."""
        return frozenset({self.owner, *(e.target for e in self.effects)})

    @property
    def takes_reader(self) -> bool:
        """Whether the event acts for a reader."""
        return "r" in self.event.args

    @property
    def takes_page(self) -> bool:
        """Whether the event acts on a page."""
        return "p" in self.event.args


@dataclass(frozen=True)
class CompiledProperty:
    """An invariant, lemma or step property compiled over the runtime's domains (no aggregates)."""

    prop: Property
    expr: Expr
    fn: Compiled
    text: str
    reads: frozenset[str]


@dataclass(frozen=True)
class CompiledLookup:
    """The lookup section: per object, needed(p, pos), ready(p) and each recovery path's condition."""

    objects: tuple[str, ...]
    needed: Mapping[str, Compiled]
    needed_reads_state: Mapping[str, bool]
    ready: Mapping[str, Compiled]
    vready: Mapping[str, VecCompiled]
    ready_local: Mapping[str, bool]
    ready_text: Mapping[str, str]
    recovery: Mapping[str, Mapping[str, Compiled]]
    reads: frozenset[str]
    ir: Mapping[str, tuple[Expr, Mapping[str, Expr]]]  # each object's ready and recovery conditions as compiled


class CompiledSpec:
    """A many-reader spec compiled with the runtime's constants."""

    def __init__(self, spec: Spec, constants: Mapping[str, int]) -> None:
        self.spec = spec
        self.constants = dict(constants)
        self.codes: dict[str, dict[str, int]] = {n: {s: i for i, s in enumerate(o.states)}
                                                 for n, o in spec.objects.items()}
        self.state_names: dict[str, tuple[str, ...]] = {n: o.states for n, o in spec.objects.items()}
        self.ghosts = spec.ghosts
        by_scope: dict[str, list[str]] = {SYSTEM: [], PAGE: [], READER: [], READER_PAGE: []}
        self.init: dict[str, int] = {}
        for name, decl in spec.vars.items():
            if not decl.ghost:
                by_scope[decl.scope].append(name)
                self.init[name] = int(decl.init)
        for name, obj in spec.objects.items():
            by_scope[obj.scope].append(name)
            self.init[name] = self.codes[name][obj.initial]
        if by_scope[SYSTEM]:
            raise ConfigError(f"spec '{spec.name}': the runtime runs a many-reader design; system-scoped "
                              f"state ({', '.join(by_scope[SYSTEM])}) has no runtime meaning")
        self.page_names = tuple(by_scope[PAGE])
        self.reader_names = tuple(by_scope[READER])
        self.rp_names = tuple(by_scope[READER_PAGE])
        self.scopes = {n: spec.scope_of(n) for n in self.init}
        self.table = DomainTable(spec)
        self.memo: dict[object, object] = {}  # analyses derived once per compiled spec (batch plans, proofs)
        self.tracked: dict[str, Reduce] = {}  # '@inc<i>' -> a reduction over a reader's pages (incremental.py)
        self.bounds: dict[str, tuple[Bound, Bound]] = {
            name: (self._bound(b.lo), self._bound(b.hi)) for name, b in declared_bounds(spec).items()}
        props = [p for p in spec.properties if not (self._reads_of(p.expr) & self.ghosts)]
        compiled = [self._property(p) for p in props]
        self.invariants = tuple(c for c in compiled if c.prop.kind in ("invariant", "lemma"))
        steps: dict[str, list[CompiledProperty]] = {}
        for c in compiled:
            if c.prop.kind == "step" and c.prop.event is not None:
                steps.setdefault(c.prop.event, []).append(c)
        self.events = {ev.name: self._event(ev, tuple(steps.get(ev.name, ()))) for ev in spec.events if not ev.env}
        self.lookup = self._lookup()
        self.reverse_indexed = frozenset(
            v for ev in self.events.values() for d in self.domains_read(ev) if d.kind == PAGE_READERS for v in d.vars)

    # -- helpers ----------------------------------------------------------------------------------
    @property
    def domains(self) -> Mapping[str, Domain]:
        """Every runtime domain a compiled expression ranges over, by names key."""
        return self.table.domains

    @property
    def aggregates(self) -> Mapping[str, Aggregate]:
        """Page aggregates the events read, by names key."""
        return self.table.aggregates

    def domains_read(self, ev: CompiledEvent) -> list[Domain]:
        """The domains an event's guard and effects range over (tracked reductions' included)."""
        names = set(ev.reads) | {self.tracked[n].domain for n in ev.reads if n in self.tracked}
        return [self.domains[n] for n in sorted(names) if n in self.domains] + [e.star for e in ev.effects if e.star]

    def _reads_of(self, e: Expr) -> frozenset[str]:
        """Names ``e`` reads: scalars, indexed variables and the runtime domains its reductions range over."""
        return frozenset(free_names(e) | array_names(e) | {n.domain for n in walk(e) if isinstance(n, Reduce)})

    def _prep(self, e: Expr, obj: str | None = None, observes: tuple[str, ...] = (), aggregates: bool = True) -> Expr:
        out = fold(e, self.constants)
        if observes:
            out = replace_index(out, lambda n: Name(OBS + n.name, n.loc) if n.name in observes else None)
        out = self.table.restrict(out, aggregates)
        return encode_states(out, self.codes, obj)

    def _track(self, e: Expr) -> Expr:
        """``e`` with every ``all(... for q in pages of r)`` that reads nothing but ``r``'s and ``q``'s state
        replaced by a tracked name (maintained by ``incremental.Incremental``)."""
        def make(node: Reduce) -> Expr | None:
            dom = self.domains.get(node.domain)
            if node.kind != "all" or dom is None or dom.kind != READER_PAGES or dom.key != "r" or \
                    free_names(node) - {"r"}:
                return None
            if all(not isinstance(x, Index) or x.name in dom.vars for x in walk(node.body)):
                return None  # the body reads only the domain's own entries: evaluating it is cheap
            text = render(node)
            for name, known in self.tracked.items():
                if render(known) == text:
                    return Name(name, node.loc)
            name = f"@inc{len(self.tracked)}"
            self.tracked[name] = node
            return Name(name, node.loc)

        return replace_reductions(e, make)

    def _bound(self, e: Expr | None) -> Bound:
        if e is None:
            return None
        folded = fold(e, self.constants)
        if isinstance(folded, Const) and isinstance(folded.value, int) and not isinstance(folded.value, bool):
            return folded.value
        return compile_expr(folded)

    def _property(self, prop: Property) -> CompiledProperty:
        e = self._prep(prop.expr, aggregates=False)
        return CompiledProperty(prop, e, compile_source(e), render(prop.expr), self._reads_of(prop.expr))

    # -- events -----------------------------------------------------------------------------------
    def _event(self, ev: Event, steps: tuple[CompiledProperty, ...]) -> CompiledEvent:
        obs = ev.observes
        guard = self._track(self._prep(ev.guard, observes=obs))
        parts = []
        for c in conjuncts(ev.guard):
            plain = self._prep(c, observes=obs)
            e = self._track(plain)
            parts.append(Conjunct(render(c), e, compile_source(e), compile_vector(e), self._reads_of(e),
                                  compile_expr(e), Witness.of(plain, self._reads_of, self.domains)))
        effects = []
        reads = set(self._reads_of(guard))
        for eff in ev.effects:
            if eff.target in self.ghosts:
                continue
            obj = eff.target if eff.target in self.codes else None
            value = self._prep(eff.value, obj, obs)
            reads |= self._reads_of(value)
            star = self.table.star(eff.target, eff.index or "", eff.value) if eff.index and "*" in eff.index else None
            lo, hi = self.bounds.get(eff.target, (None, None))
            effects.append(CompiledEffect(eff.target, self.scopes[eff.target], eff.index or "", render(eff.value),
                                          value, compile_source(value), compile_vector(value), lo, hi, star,
                                          compile_expr(value)))
        return CompiledEvent(
            ev, ev.name, ev.owner, ev.scope, frozenset(self.codes[ev.owner][s] for s in ev.sources),
            self.codes[ev.owner][ev.target], render(ev.guard), compile_source(guard), compile_vector(guard),
            tuple(parts), tuple(effects), tuple(param_at(prm, self.constants) for prm in ev.params), obs,
            frozenset(reads), compile_expr(guard), steps)

    # -- lookup -----------------------------------------------------------------------------------
    def _lookup(self) -> CompiledLookup:
        lk = self.spec.lookup
        needed, needed_state, ready, vready, local, text = {}, {}, {}, {}, {}, {}
        recovery: dict[str, dict[str, Compiled]] = {}
        reads: set[str] = set()
        for obj in lk.objects:
            n = fold(lk.needed[obj], self.constants)
            needed[obj] = compile_expr(n)
            needed_state[obj] = bool(array_names(n) or (free_names(n) - {"p", "pos"}))
            r = self._prep(lk.ready[obj])
            ready[obj] = compile_source(r)
            vready[obj] = compile_vector(r)
            local[obj] = all(not isinstance(x, Index) or (len(x.args) == 1 and isinstance(x.args[0], Name)
                                                          and x.args[0].name == "p") for x in walk(r)) \
                and not (free_names(r) - {"p"})
            text[obj] = render(lk.ready[obj])
            reads |= array_names(r)
            recovery[obj] = {path: compile_expr(self._prep(cond)) for path, cond in lk.recovery.get(obj, {}).items()}
        return CompiledLookup(lk.objects, needed, needed_state, ready, vready, local, text, recovery, frozenset(reads),
                              {o: (self._prep(lk.ready[o]),
                                   {k: self._prep(e) for k, e in lk.recovery.get(o, {}).items()}) for o in lk.objects})

    def event(self, name: str) -> CompiledEvent:
        """The compiled event ``name``; ConfigError if the spec has none."""
        try:
            return self.events[name]
        except KeyError:
            raise ConfigError(f"the spec has no event '{name}'") from None

    def decode(self, name: str, value: object) -> object:
        """A stored value as the spec writes it: a state name for an object, a bool for a bool variable."""
        if name in self.state_names:
            return self.state_names[name][int(value)]  # type: ignore[call-overload]
        decl = self.spec.vars.get(name)
        if decl is not None and decl.type == "bool":
            return bool(value)
        return int(value)  # type: ignore[call-overload]
