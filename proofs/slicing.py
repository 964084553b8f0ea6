"""Cone of influence: the variables and events a set of properties depends on.

A search for a violation of some properties only needs the state those properties read, the events
that can change it, and whatever those events' guards and effects read, closed under that rule::

    V := names the properties read
    repeat: E := events that write a name in V (an event writes its owner object's state)
            V += names read by the guards of E, by their effects on V, and by their effects whose
                 result may leave the target's declared bounds (such a transition is disabled)
    until nothing changes

Every other event writes only names outside V and its enabledness never matters to one inside, so
dropping it (and the names outside V) keeps every behaviour's projection on V: a violation is
reachable in the slice exactly when it is reachable in the whole system, in as many steps.  A trace
found in the slice is replayed on the whole system to fill in the rest of the state.

Whether an effect may leave its target's bounds is decided by interval arithmetic over the declared
bounds (``content[p] + 1`` with ``content`` in ``[0, inf)`` never drops below 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from morphcache.spec.expr import Binary, Const, Expr, IfExp, Index, Name, Reduce, Unary, walk
from morphcache.spec.interp import evaluate
from morphcache.spec.model import Effect, Event, Property, Spec

Interval = tuple[float, float]
_ANY: Interval = (float("-inf"), float("inf"))


@dataclass(frozen=True)
class Slice:
    """The names (variables and object states) and the events a search keeps."""

    names: frozenset[str]
    events: tuple[str, ...]

    def covers(self, e: Expr, spec: Spec) -> bool:
        """Whether every state name ``e`` reads is kept."""
        return reads(e, spec) <= self.names


def reads(e: Expr, spec: Spec) -> set[str]:
    """The variables and object states ``e`` reads."""
    return {n.name for n in walk(e) if isinstance(n, (Name, Index))
            and (n.name in spec.vars or n.name in spec.objects)}


def property_reads(spec: Spec, prop: Property) -> set[str]:
    """What deciding ``prop`` in a state reads (a step property: also its event's enabling and result)."""
    out = reads(prop.expr, spec)
    if prop.kind == "step":
        ev = spec.event(str(prop.event))
        out |= event_reads(spec, ev) | {eff.target for eff in ev.effects}
        for eff in ev.effects:
            out |= reads(eff.value, spec)
    return out


def event_reads(spec: Spec, ev: Event) -> set[str]:
    """What decides whether ``ev`` may fire: its owner's state and its guard."""
    return {ev.owner} | reads(ev.guard, spec)


def cone(spec: Spec, props: Iterable[Property], constants: Mapping[str, int] | None = None) -> Slice:
    """The cone of influence of ``props`` (see the module docstring)."""
    bounds = Bounds(spec, constants)
    props = list(props)
    names: set[str] = set()
    for prop in props:
        names |= property_reads(spec, prop)
    while True:
        grown = set(names)
        for ev in spec.events:
            if not _writes(ev) & grown:
                continue
            grown |= event_reads(spec, ev)
            for eff in ev.effects:
                if eff.target in grown or bounds.may_leave(eff):
                    grown |= {eff.target} | reads(eff.value, spec)
        if grown == names:
            break
        names = grown
    watched = {str(p.event) for p in props if p.kind == "step"}  # a step property is decided at its event
    events = tuple(ev.name for ev in spec.events if _writes(ev) & names or ev.name in watched)
    return Slice(frozenset(names), events)


def _writes(ev: Event) -> set[str]:
    """What ``ev`` may change: its effects' targets, and its owner's state unless it only loops."""
    moves = any(src != ev.target for src in ev.sources)
    return ({ev.owner} if moves else set()) | {eff.target for eff in ev.effects}


class Bounds:
    """Declared bounds of the spec's integer variables, and interval arithmetic over them."""

    def __init__(self, spec: Spec, constants: Mapping[str, int] | None = None) -> None:
        self.spec = spec
        self.constants = {**spec.constants, **(constants or {}), "pages": spec.pages, "readers": spec.readers}
        self.declared: dict[str, Interval] = {}
        for name, decl in spec.vars.items():
            if decl.type != "int":
                continue
            lo = evaluate(decl.min_expr, self.constants) if decl.min_expr is not None else float("-inf")
            hi = evaluate(decl.max_expr, self.constants) if decl.max_expr is not None else float("inf")
            self.declared[name] = (lo, hi)

    def may_leave(self, eff: Effect) -> bool:
        """Whether the effect's value may fall outside its target's declared bounds."""
        target = self.declared.get(eff.target)
        if target is None or target == _ANY:
            return False
        lo, hi = self.interval(eff.value)
        return lo < target[0] or hi > target[1]

    def interval(self, e: Expr) -> Interval:  # noqa: C901 - one case per node kind
        """An interval containing every value of the int expression ``e`` in the declared domain."""
        if isinstance(e, Const):
            return (e.value, e.value) if isinstance(e.value, int) and not isinstance(e.value, bool) else _ANY
        if isinstance(e, (Name, Index)):
            if isinstance(e, Name) and e.name in self.constants:
                v = self.constants[e.name]
                return (v, v)
            return self.declared.get(e.name, _ANY)
        if isinstance(e, Unary) and e.op == "-":
            lo, hi = self.interval(e.operand)
            return (-hi, -lo)
        if isinstance(e, Binary) and e.op in ("+", "-", "*"):
            (a, b), (c, d) = self.interval(e.left), self.interval(e.right)
            if e.op == "+":
                return (a + c, b + d)
            if e.op == "-":
                return (a - d, b - c)
            if float("inf") in (abs(a), abs(b), abs(c), abs(d)):
                return _ANY
            products = [a * c, a * d, b * c, b * d]
            return (min(products), max(products))
        if isinstance(e, IfExp):
            (a, b), (c, d) = self.interval(e.then), self.interval(e.other)
            return (min(a, c), max(b, d))
        if isinstance(e, Reduce) and e.kind == "sum":
            n = self.spec.readers if e.domain == "readers" else self.spec.pages
            lo, hi = self.interval(e.body) if _is_int(e.body, self) else (0, 1)
            return (min(0, lo * n), max(0, hi * n))
        return _ANY


def _is_int(e: Expr, bounds: Bounds) -> bool:
    """Whether a reduction body is an int (else a bool counted as 0 or 1)."""
    if isinstance(e, Const):
        return isinstance(e.value, int) and not isinstance(e.value, bool)
    if isinstance(e, Binary):
        return True
    if isinstance(e, (Name, Index)):
        return e.name in bounds.declared or e.name in bounds.constants
    if isinstance(e, IfExp):
        return _is_int(e.then, bounds)
    return False
