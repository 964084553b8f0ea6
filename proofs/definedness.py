"""Well-definedness: every ``//`` and ``%`` is evaluated with a non-zero divisor.

Z3's integer division is total (``x div 0`` is some unspecified integer), so a property that divides
by zero can be "proved".  Python raises ``ZeroDivisionError``.  The checker closes the gap:

* a divisor that is a constant expression (constants, ``pages``, ``readers``, literals) is folded;
  zero is a spec error at the divisor, ``file:line:col``;
* any other divisor gives an obligation, a candidate invariant proved or refuted like every
  property: the divisor is non-zero wherever the expression is evaluated.

Where an expression is evaluated::

    guard of an event        every state where the event's owner is in one of its source states
    effect of an event       every state where the event is enabled (source state and guard)
    invariant, lemma         every state
    step property            every state where its event is enabled

Evaluation follows Python: ``a and b`` evaluates ``b`` only where ``a`` holds, ``a or b`` only where
``a`` fails, ``implies(a, b)`` only where ``a`` holds, ``x if c else y`` one branch; a reduction
(``all``, ``any``, ``sum``) may be evaluated over its domain in any order, so every element must
be defined.  Lookup expressions and event params may divide only by constants (a spec error
otherwise): their obligations would need quantifiers over positions and params.
"""

from __future__ import annotations

from collections.abc import Iterator

from morphcache.spec.errors import SpecError
from morphcache.spec.expr import (
    PAGES,
    READERS,
    Binary,
    BoolOp,
    Compare,
    Const,
    Expr,
    IfExp,
    Implies,
    Index,
    InSet,
    Name,
    Reduce,
    Unary,
    children,
    render,
)
from morphcache.spec.interp import evaluate
from morphcache.spec.model import SCOPE_ARGS, Event, Property, Spec

DEFINED = "defined"
_TRUE = Const(True)


def _and(parts: list[Expr]) -> Expr:
    parts = [x for x in parts if x != _TRUE]
    if not parts:
        return _TRUE
    return parts[0] if len(parts) == 1 else BoolOp("and", tuple(parts))


def _implies(cond: Expr, then: Expr) -> Expr:
    return _TRUE if then == _TRUE else Implies(cond, then)


class Definedness:
    """Folds constant divisors and builds the definedness obligations of one spec."""

    def __init__(self, spec: Spec, constants: dict[str, int] | None = None) -> None:
        self.spec = spec
        self.constants: dict[str, int] = {**spec.constants, **(constants or {}),
                                          "pages": spec.pages, "readers": spec.readers}

    # -- constants ---------------------------------------------------------------------------
    def constant(self, e: Expr) -> bool:
        """Whether ``e`` reads only constants and literals."""
        if isinstance(e, Name):
            return e.name in self.constants
        if isinstance(e, (Index, Reduce)):
            return False
        return all(self.constant(c) for c in children(e))

    def _zero(self, node: Binary) -> SpecError:
        loc = node.right.loc if node.right.loc.line else node.loc
        return SpecError(self.spec.path, loc.line, loc.col,
                         f"division by zero: the divisor of '{render(node)}' is the constant "
                         f"'{render(node.right)}', which is 0")

    def divisor_condition(self, node: Binary) -> Expr:
        """``divisor != 0``, or true for a non-zero constant divisor; a zero constant is a spec error."""
        if self.constant(node.right):
            try:
                value = evaluate(node.right, self.constants)
            except ZeroDivisionError:
                raise self._zero(node) from None
            if value == 0:
                raise self._zero(node)
            return _TRUE
        return Compare("!=", node.right, Const(0), node.right.loc)

    # -- the condition under which an expression is defined ------------------------------------
    def defined(self, e: Expr) -> Expr:  # noqa: C901 - one case per node kind
        """An expression that holds exactly where evaluating ``e`` divides by no zero."""
        if isinstance(e, (Const, Name)):
            return _TRUE
        if isinstance(e, Binary):
            parts = [self.defined(e.left), self.defined(e.right)]
            if e.op in ("//", "%"):
                parts.append(self.divisor_condition(e))
            return _and(parts)
        if isinstance(e, BoolOp):
            out: list[Expr] = []
            for i, v in enumerate(e.values):
                d = self.defined(v)
                before = e.values[:i]
                if not before:
                    out.append(d)
                elif e.op == "and":
                    out.append(_implies(_and(list(before)), d))
                else:
                    out.append(_implies(_and([Unary("not", b) for b in before]), d))
            return _and(out)
        if isinstance(e, Implies):
            return _and([self.defined(e.left), _implies(e.left, self.defined(e.right))])
        if isinstance(e, IfExp):
            return _and([self.defined(e.cond), _implies(e.cond, self.defined(e.then)),
                         _implies(Unary("not", e.cond), self.defined(e.other))])
        if isinstance(e, Reduce):
            body = self.defined(e.body)
            return _TRUE if body == _TRUE else Reduce("all", e.var, body, e.loc, e.domain)
        if isinstance(e, (Index, Unary, Compare, InSet)):
            return _and([self.defined(c) for c in children(e)])
        raise TypeError(f"not an expression node: {e!r}")

    # -- obligations ----------------------------------------------------------------------------
    def obligations(self) -> list[Property]:
        """Every definedness obligation of the spec (none when it divides only by non-zero constants)."""
        out: list[Property] = []
        for ev in self.spec.events:
            out += self._event(ev)
        for prop in self.spec.properties:
            cond = self.defined(prop.expr)
            if cond == _TRUE:
                continue
            if prop.kind == "step":
                ev = self.spec.event(str(prop.event))
                cond = self._ground(ev, _implies(_and([self._at_source(ev), ev.guard]), cond))
            out.append(Property(f"defined: {prop.name}", DEFINED, cond, None, None,
                                f"every // and % of '{prop.name}' has a non-zero divisor", prop.loc))
        for expr in self._lookup_expressions():
            self._constant_divisors_only(expr, "a lookup expression")
        return out

    def _event(self, ev: Event) -> list[Property]:
        guard = self.defined(ev.guard)
        effects = [self._effect_defined(ev, i) for i in range(len(ev.effects))]
        out = []
        if ev.params and (guard != _TRUE or any(e != _TRUE for e in effects)):
            self._constant_divisors_only(ev.guard, f"event '{ev.name}' (it has params)")
            for eff in ev.effects:
                self._constant_divisors_only(eff.value, f"event '{ev.name}' (it has params)")
        if guard != _TRUE:
            out.append(Property(f"defined: guard of {ev.name}", DEFINED,
                                self._ground(ev, _implies(self._at_source(ev), guard)), None, None,
                                f"the guard of '{ev.name}' divides by no zero where it is evaluated", ev.loc))
        body = _and(effects)
        if body != _TRUE:
            out.append(Property(f"defined: effects of {ev.name}", DEFINED,
                                self._ground(ev, _implies(_and([self._at_source(ev), ev.guard]), body)), None, None,
                                f"the effects of '{ev.name}' divide by no zero where it fires", ev.loc))
        return out

    def _effect_defined(self, ev: Event, i: int) -> Expr:
        eff = ev.effects[i]
        cond = self.defined(eff.value)
        if cond == _TRUE or eff.index is None:
            return cond
        dims = SCOPE_ARGS[self.spec.scope_of(eff.target)]
        for dim, part in reversed(list(zip(dims, eff.index.split(","), strict=True))):
            if part == "*":
                cond = Reduce("all", "s" if dim == "r" else "q", cond, eff.loc, READERS if dim == "r" else PAGES)
        return cond

    def _at_source(self, ev: Event) -> Expr:
        return at_source(ev)

    def _ground(self, ev: Event, body: Expr) -> Expr:
        return for_every_grounding(ev, body)

    def _lookup_expressions(self) -> Iterator[Expr]:
        lookup = self.spec.lookup
        yield from lookup.needed.values()
        yield from lookup.ready.values()
        for paths in lookup.recovery.values():
            yield from paths.values()

    def _constant_divisors_only(self, e: Expr, where: str) -> None:
        for node in _postorder(e):
            if isinstance(node, Binary) and node.op in ("//", "%") and self.divisor_condition(node) != _TRUE:
                loc = node.right.loc if node.right.loc.line else node.loc
                raise SpecError(self.spec.path, loc.line, loc.col,
                                f"{where} divides by '{render(node.right)}', which is not a constant: "
                                "only constant divisors are allowed there")


def _postorder(e: Expr) -> Iterator[Expr]:
    for c in children(e):
        yield from _postorder(c)
    yield e


def check_constant_divisors(spec: Spec, constants: dict[str, int] | None = None) -> None:
    """Raise a located :class:`SpecError` at the first constant divisor that is zero, anywhere in the spec."""
    d = Definedness(spec, constants)
    exprs: list[Expr] = [ev.guard for ev in spec.events] + [eff.value for ev in spec.events for eff in ev.effects]
    exprs += [p.expr for p in spec.properties] + list(d._lookup_expressions())
    exprs += [x for v in spec.vars.values() for x in (v.min_expr, v.max_expr) if x is not None]
    for e in exprs:
        for node in _postorder(e):
            if isinstance(node, Binary) and node.op in ("//", "%") and d.constant(node.right):
                d.divisor_condition(node)


def at_source(ev: Event) -> Expr:
    """``owner in {sources}`` of ``ev`` (free names ``r``/``p`` as its scope takes them)."""
    dims = SCOPE_ARGS[ev.scope]
    owner: Expr = Index(ev.owner, tuple(Name(d) for d in dims)) if dims else Name(ev.owner)
    return InSet(owner, tuple(Const(s) for s in ev.sources))


def for_every_grounding(ev: Event, body: Expr) -> Expr:
    """``body`` for every reader and page ``ev`` may act for (``all`` over ``r`` and ``p``)."""
    if ev.takes_page:
        body = Reduce("all", "p", body, ev.loc, PAGES)
    if ev.takes_reader:
        body = Reduce("all", "r", body, ev.loc, READERS)
    return body


def whenever_enabled(spec: Spec, prop: Property) -> Expr:
    """A step property as an invariant: for every grounding of its event, if the event is enabled
    (source state and guard), the property's expression holds.  Stronger than the step property
    (which also asks that the result stay in bounds), so proving it proves the step property."""
    ev = spec.event(str(prop.event))
    return for_every_grounding(ev, _implies(_and([at_source(ev), ev.guard]), prop.expr))

