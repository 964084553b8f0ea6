"""What a spec's expressions say about its objects: references in guards, writes by effects.

* :func:`referenced_objects` finds the objects a guard reads (their state, or a variable they own),
  which the overview draws as cross-object edges.
* :func:`foreign_writes` finds the effects of *other* objects' events that set an object's state
  (``tier.recompute`` sets ``tail[p] := 'sealed'``), which a lifecycle draws as dashed edges.
"""

from __future__ import annotations

from dataclasses import dataclass

from morphcache.spec.expr import (
    BoolOp,
    Compare,
    Const,
    Expr,
    IfExp,
    Index,
    InSet,
    Name,
    Unary,
    walk,
)
from morphcache.spec.model import Effect, Event, Spec

_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def var_owners(spec: Spec) -> dict[str, str]:
    """Variable name -> the object that owns it (``pin`` -> ``lease``); unowned variables are absent."""
    return {name: decl.owner for name, decl in spec.vars.items() if decl.owner is not None}


def referenced_objects(spec: Spec, e: Expr) -> list[str]:
    """The objects whose state or own variables ``e`` reads, in spec order."""
    owners = var_owners(spec)
    found: set[str] = set()
    for node in walk(e):
        if isinstance(node, (Name, Index)):
            if node.name in spec.objects:
                found.add(node.name)
            elif node.name in owners:
                found.add(owners[node.name])
    return [name for name in spec.objects if name in found]


def negate(e: Expr) -> Expr:
    """A readable negation: flip a comparison or a membership, drop a double ``not``."""
    if isinstance(e, Compare):
        return Compare(_NEGATED[e.op], e.left, e.right, e.loc)
    if isinstance(e, InSet):
        return InSet(e.item, e.options, not e.negated, e.loc)
    if isinstance(e, Unary) and e.op == "not":
        return e.operand
    return Unary("not", e)


def _conjoin(conds: tuple[Expr, ...]) -> Expr | None:
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else BoolOp("and", conds)


def value_branches(value: Expr, conds: tuple[Expr, ...] = ()) -> list[tuple[str | None, Expr | None]]:
    """The state literals an effect value can produce, each with the condition that selects it.

    ``'live' if c else 'expired'`` gives ``[('live', c), ('expired', not c)]``.  A value that is not
    built from literals gives ``[(None, None)]`` (any state).
    """
    if isinstance(value, Const) and isinstance(value.value, str):
        return [(value.value, _conjoin(conds))]
    if isinstance(value, IfExp):
        return value_branches(value.then, (*conds, value.cond)) + value_branches(
            value.other, (*conds, negate(value.cond))
        )
    return [(None, None)]


@dataclass(frozen=True)
class ForeignWrite:
    """An effect of ``event`` (of another object) that puts the object into ``state`` when ``cond``."""

    event: Event
    effect: Effect
    state: str | None
    cond: Expr | None

    @property
    def title(self) -> str:
        """``owner.event``: how the foreign event is named on the edge."""
        return f"{self.event.owner}.{self.event.name}"


def foreign_writes(spec: Spec, obj: str) -> list[ForeignWrite]:
    """Effects of other objects' events that set ``obj``'s state, in spec order."""
    out: list[ForeignWrite] = []
    for event in spec.events:
        if event.owner == obj:
            continue
        for effect in event.effects:
            if effect.target != obj:
                continue
            for state, cond in value_branches(effect.value):
                out.append(ForeignWrite(event, effect, state, cond))
    return out


def written_objects(spec: Spec, event: Event) -> list[str]:
    """The other objects whose state (or own variables) ``event``'s effects write, in spec order."""
    owners = var_owners(spec)
    found = {owners.get(eff.target, eff.target) for eff in event.effects}
    return [name for name in spec.objects if name in found and name != event.owner]
