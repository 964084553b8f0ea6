"""The checked instance as generated Python: initial state, successor function, property checks.

For the explicit-state search (:mod:`proofs.bfs`) and for replaying traces.  A state is a tuple with
one entry per slot (``tail[0]``, ``frontier[r1]``, ``block[r0,2]``: the slots of
:mod:`proofs.terms`), an object state by name.  Guards, effects and properties are compiled from the
expression IR to Python source, grounded over the instance's readers and pages (reductions unrolled,
subscripts resolved to tuple positions), so a guard is a chain of tuple lookups.  The source is built
only from the IR (names, literals' ``repr``), never from spec text.

A division by zero raised while evaluating a guard or an effect disables that transition here;
:mod:`proofs.definedness` reports it as a refuted obligation.  A transition whose effects leave a
declared bound is disabled, as in the proofs and the runtime.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from morphcache.spec.expr import (
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
    walk,
)
from morphcache.spec.interp import evaluate
from morphcache.spec.model import SCOPE_ARGS, Event, Property, Spec

from .slicing import Slice
from .symmetry import Canonical, symmetric_dims
from .terms import EncodingError, slot

State = tuple[Any, ...]


@dataclass(frozen=True)
class Grounding:
    """One action of the instance: an event with its reader, page and params."""

    event: Event
    args: dict[str, int]

    def label(self) -> str:
        return f"{self.event.name}({', '.join(f'{k}={v}' for k, v in self.args.items())})"


class ExplicitSystem:
    """The instance as generated Python: initial state, successor function, property checks."""

    def __init__(self, spec: Spec, constants: Mapping[str, int] | None = None, keep: Slice | None = None,
                 symmetry: bool = True) -> None:
        self.spec = spec
        self.keep = keep
        self.constants: dict[str, Any] = {**spec.constants, **(constants or {}),
                                          "pages": spec.pages, "readers": spec.readers}
        self.slots: list[tuple[str, tuple[int, ...]]] = []
        for name in [*spec.vars, *spec.objects]:
            if keep is not None and name not in keep.names:
                continue
            dims = SCOPE_ARGS[spec.scope_of(name)]
            sizes = [range(spec.readers if d == "r" else spec.pages) for d in dims]
            self.slots += [(name, key) for key in itertools.product(*sizes)]
        self.pos = {s: i for i, s in enumerate(self.slots)}
        self.names = [self._slot_name(n, k) for n, k in self.slots]
        self.initial: State = tuple(spec.objects[n].initial if n in spec.objects else spec.vars[n].init
                                    for n, _ in self.slots)
        self.bounds = self._bounds()
        self._fire: dict[tuple[str, tuple[tuple[str, int], ...]], Callable[[State], State | None]] = {}
        self.actions: list[Grounding] = []
        self._successors: Callable[[State], Any] | None = None
        self.reduce = symmetry
        self._canonical: Callable[[State], Any] | None = None

    @property
    def successors(self) -> Callable[[State], Any]:
        """``successors(st)`` yields ``(action code, next state)`` (compiled on first use)."""
        if self._successors is None:
            self._successors = self._compile_successors()
        return self._successors


    def _slot_name(self, name: str, key: tuple[int, ...]) -> str:
        dims = SCOPE_ARGS[self.spec.scope_of(name)]
        at = dict(zip(dims, key, strict=True))
        return slot(name, at.get("p"), at.get("r"))

    def _bounds(self) -> dict[int, tuple[int | None, int | None]]:
        out: dict[int, tuple[int | None, int | None]] = {}
        for i, (name, _) in enumerate(self.slots):
            decl = self.spec.vars.get(name)
            if decl is None or decl.type != "int":
                continue
            lo = evaluate(decl.min_expr, self.constants) if decl.min_expr is not None else None
            hi = evaluate(decl.max_expr, self.constants) if decl.max_expr is not None else None
            if lo is not None or hi is not None:
                out[i] = (lo, hi)
        return out

    # -- code generation -----------------------------------------------------------------------
    def py(self, e: Expr, env: Mapping[str, Any]) -> str:  # noqa: C901 - one case per node kind
        """Python source of ``e`` over the state tuple ``st``, with ``env`` bound to concrete values."""
        if isinstance(e, Const):
            return repr(e.value)
        if isinstance(e, Name):
            if e.name in env:
                return repr(env[e.name])
            if e.name in self.constants:
                return repr(self.constants[e.name])
            return f"st[{self.pos[(e.name, ())]}]"
        if isinstance(e, Index):
            key = tuple(self._concrete(a, env) for a in e.args)
            at = self.pos.get((e.name, key))
            if at is None:
                raise EncodingError(e.loc.file or self.spec.path, e.loc.line, e.loc.col,
                                    f"{e.name}{list(key)} is outside the instance")
            return f"st[{at}]"
        if isinstance(e, Unary):
            return f"(not {self.py(e.operand, env)})" if e.op == "not" else f"(-{self.py(e.operand, env)})"
        if isinstance(e, (Binary, Compare)):
            return f"({self.py(e.left, env)} {e.op} {self.py(e.right, env)})"
        if isinstance(e, InSet):
            options = ", ".join(self.py(o, env) for o in e.options)
            return f"({self.py(e.item, env)} {'not in' if e.negated else 'in'} ({options},))"
        if isinstance(e, BoolOp):
            return "(" + f" {e.op} ".join(self.py(v, env) for v in e.values) + ")"
        if isinstance(e, Implies):
            return f"((not {self.py(e.left, env)}) or bool({self.py(e.right, env)}))"
        if isinstance(e, IfExp):
            return f"({self.py(e.then, env)} if {self.py(e.cond, env)} else {self.py(e.other, env)})"
        if isinstance(e, Reduce):
            ids = range(self.spec.readers if e.domain == READERS else self.spec.pages)
            parts = [self.py(e.body, {**env, e.var: i}) for i in ids]
            if e.kind == "all":
                return "(" + " and ".join(parts) + ")" if parts else "True"
            if e.kind == "any":
                return "(" + " or ".join(parts) + ")" if parts else "False"
            return "(" + " + ".join(f"int({x})" for x in parts) + ")" if parts else "0"
        raise TypeError(f"not an expression node: {e!r}")

    def _concrete(self, e: Expr, env: Mapping[str, Any]) -> int:
        """A subscript's value: subscripts depend only on ids, params' values and constants."""
        return int(evaluate(e, {**self.constants, **env}))

    def groundings(self, ev: Event) -> list[dict[str, int]]:
        """Every ``{r, p, params}`` the event may fire with in the instance."""
        axes: list[list[tuple[str, int]]] = []
        if ev.takes_reader:
            axes.append([("r", r) for r in self.spec.reader_range()])
        if ev.takes_page:
            axes.append([("p", p) for p in self.spec.page_range()])
        for prm in ev.params:
            axes.append([(prm.name, v) for v in range(prm.min, prm.max + 1)])
        return [dict(combo) for combo in itertools.product(*axes)]

    def _owner(self, ev: Event, env: Mapping[str, int]) -> int:
        return self.pos[(ev.owner, tuple(env[d] for d in SCOPE_ARGS[ev.scope]))]

    def writes(self, ev: Event, env: Mapping[str, int]) -> dict[int, str]:
        """Slot index -> Python source of its new value (computed on the pre-state)."""
        out = {self._owner(ev, env): repr(ev.target)}
        for eff in ev.effects:
            if self.keep is not None and eff.target not in self.keep.names:
                continue  # outside the slice: its value matters to nothing kept, and it stays in bounds
            dims = SCOPE_ARGS[self.spec.scope_of(eff.target)]
            parts = eff.index.split(",") if eff.index is not None else []
            axes = []
            for dim, part in zip(dims, parts, strict=True):
                size = self.spec.readers if dim == "r" else self.spec.pages
                star = "s" if dim == "r" else "q"
                axes.append([(i, star) for i in range(size)] if part == "*" else [(env[dim], None)])
            for combo in itertools.product(*axes):
                bound = {**env, **{star: i for i, star in combo if star is not None}}
                out[self.pos[(eff.target, tuple(i for i, _ in combo))]] = self.py(eff.value, bound)
        return out

    def enabled_source(self, ev: Event, env: Mapping[str, int]) -> str:
        """Source of "the owner is in a source state and the guard holds"."""
        return f"st[{self._owner(ev, env)}] in {tuple(ev.sources)!r} and {self.py(ev.guard, env)}"

    def in_domain(self, writes: Mapping[int, str]) -> str:
        checks = []
        for i in writes:
            lo, hi = self.bounds.get(i, (None, None))
            if lo is not None:
                checks.append(f"v{i} >= {lo}")
            if hi is not None:
                checks.append(f"v{i} <= {hi}")
        return " and ".join(checks) or "True"

    def _compile_successors(self) -> Callable[[State], Any]:
        """``successors(st)``: the actions grouped by their owner's slot and source state, so each
        owner's state is read once and only the actions leaving that state test their guards."""
        blocks: dict[int, dict[str, list[list[str]]]] = {}
        for ev in self.spec.events:
            if self.keep is not None and ev.name not in self.keep.events:
                continue
            for env in self.groundings(ev):
                code = len(self.actions)
                self.actions.append(Grounding(ev, env))
                writes = self.writes(ev, env)
                body = [f"if {self.py(ev.guard, env)}:",
                        *[f"    v{i} = {v}" for i, v in writes.items()],
                        f"    if {self.in_domain(writes)}:",
                        f"        yield {code}, {_spliced(writes, len(self.slots))}"]
                if _divides(ev):
                    body = ["try:", *[f"    {line}" for line in body], "except ZeroDivisionError:", "    pass"]
                for source in ev.sources:
                    blocks.setdefault(self._owner(ev, env), {}).setdefault(source, []).append(body)
        lines = ["def successors(st):"]
        for owner, by_source in blocks.items():
            lines.append(f"    o = st[{owner}]")
            for n, (source, bodies) in enumerate(by_source.items()):
                lines.append(f"    {'if' if n == 0 else 'elif'} o == {source!r}:")
                lines += [f"        {line}" for body in bodies for line in body]
        if len(lines) == 1:
            lines.append("    yield from ()")
        return _define("\n".join(lines), "successors")

    def fire(self, st: State, event: str, args: Mapping[str, int]) -> State | None:
        """The state after ``event(args)`` fires in ``st``, or None if it may not (one action, compiled
        on first use: used to replay a trace)."""
        key = (event, tuple(sorted(args.items())))
        fn = self._fire.get(key)
        if fn is None:
            ev = self.spec.event(event)
            writes = self.writes(ev, args)
            source = "\n".join([
                "def fire(st):",
                f"    if {self.enabled_source(ev, args)}:",
                *[f"        v{i} = {v}" for i, v in writes.items()],
                f"        if {self.in_domain(writes)}:",
                f"            return {_spliced(writes, len(self.slots))}",
                "    return None",
            ])
            fn = self._fire[key] = _define(source, "fire")
        result: State | None = fn(st)
        return result

    def check(self, prop: Property) -> Callable[[State], bool]:
        """A function telling whether ``prop`` holds in a state (a step property: at every enabling of
        its event whose result stays in the domain)."""
        if prop.kind != "step":
            body = self.py(prop.expr, {})
            source = f"def holds(st):\n    try:\n        return bool({body})\n    except ZeroDivisionError:\n" \
                     "        return True  # undefined here: the property's definedness obligation reports it"
            return _define(source, "holds")
        ev = self.spec.event(str(prop.event))
        lines = ["def holds(st):"]
        for env in self.groundings(ev):
            writes = self.writes(ev, env)
            lines += [
                "    try:",
                f"        if {self.enabled_source(ev, env)}:",
                *[f"            v{i} = {v}" for i, v in writes.items()],
                f"            if {self.in_domain(writes)} and not ({self.py(prop.expr, env)}):",
                "                return False",
                "    except ZeroDivisionError:",
                "        pass",
            ]
        lines.append("    return True")
        return _define("\n".join(lines), "holds")

    @property
    def canonical(self) -> Callable[[State], Any]:
        """``canonical(st)``: a key equal for exactly the states symmetric to ``st`` (the least, over
        the permutations of interchangeable reader ids, of the slots of no page and the per-page blocks
        of slots sorted); ``st`` itself without symmetry."""
        if self._canonical is None:
            pages, readers = symmetric_dims(self.spec) if self.reduce else (False, False)
            self._canonical = Canonical(self.spec, self.slots, pages, readers).key
        return self._canonical

    def as_dict(self, st: State) -> dict[str, Any]:
        """The state keyed by slot names, as traces show it."""
        return dict(zip(self.names, st, strict=True))


def _spliced(writes: Mapping[int, str], size: int) -> str:
    """Source of ``st`` with the written slots replaced by ``v{i}``: slices of ``st`` joined with the
    new values (C-speed copies of the unchanged runs)."""
    parts: list[str] = []
    start = 0
    for i in sorted(writes):
        if i > start:
            parts.append(f"st[{start}:{i}]")
        parts.append(f"(v{i},)")
        start = i + 1
    if start < size:
        parts.append(f"st[{start}:]")
    return " + ".join(parts) if parts else "st"


def _divides(ev: Event) -> bool:
    """Whether the event's guard or effects divide (and so may raise ``ZeroDivisionError``)."""
    exprs = [ev.guard, *(eff.value for eff in ev.effects)]
    return any(isinstance(n, Binary) and n.op in ("//", "%") for e in exprs for n in walk(e))


def _define(source: str, name: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<explicit {name}>", "exec"), namespace)  # noqa: S102 - source generated from the IR
    return namespace[name]
