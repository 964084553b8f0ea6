"""Sums over a symbolic domain, kept as derived state for the parametric method.

``sum(lpin[s, q] for s in readers)`` has no first-order meaning when the number of readers is
symbolic.  It can be carried along instead: a derived array ``D[q]`` (one entry per value of the
sum's free ids, here the page ``q``), equal to the sum in the initial state (``R`` times the body's
initial value) and updated by every transition that writes what the body reads:

    a write of ``lpin`` at ``(r, p)``:  D'[p] = D[p] + body'(r, p) - body(r, p),  every other entry kept

That is exact when all the writes an event makes to the body's variables land on the same element
(one bound value and one entry), as for every event of the shipped design.  Otherwise (a ``*``
write, writes at different indexes, a system variable read by the body) the entries are left
unconstrained: more behaviours, still sound.  A sum whose body subscripts with anything but its
bound variable and free ids has no aggregate; the parametric method does not attempt it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from morphcache.spec.expr import Expr, Index, Name, Reduce, render, substitute, walk
from morphcache.spec.model import SCOPE_ARGS, Spec

_PAGE, _READER = "p", "r"


@dataclass(frozen=True)
class Aggregate:
    """A derived array for every sum of the same shape: ``key`` names its state slot."""

    key: str
    node: Reduce  # a representative: its bound variable and free ids are the ones ``free`` names
    free: tuple[str, ...]  # the representative's free ids, in order of first appearance
    dims: tuple[str, ...]  # "p" or "r" for each free id
    reads: tuple[tuple[str, tuple[str, ...]], ...]  # (variable, argument names) read by the body


def shape(spec: Spec, node: Reduce) -> tuple[str, tuple[str, ...], tuple[str, ...],
                                             tuple[tuple[str, tuple[str, ...]], ...]] | None:
    """``(canonical text, free ids, their dims, reads)`` of a sum, or None if it has no aggregate."""
    ids: list[str] = []
    dims: dict[str, str] = {}
    reads: list[tuple[str, tuple[str, ...]]] = []
    bound_dim = _READER if node.domain == "readers" else _PAGE
    for n in walk(node.body):
        if isinstance(n, Reduce):
            return None  # nested quantifiers: no single element per write
        if isinstance(n, Index):
            names = []
            for dim, arg in zip(SCOPE_ARGS[spec.scope_of(n.name)], n.args, strict=True):
                if not isinstance(arg, Name):
                    return None
                if arg.name == node.var:
                    if dim != bound_dim:
                        return None
                else:
                    if dims.setdefault(arg.name, dim) != dim:
                        return None
                    if arg.name not in ids:
                        ids.append(arg.name)
                names.append(arg.name)
            reads.append((n.name, tuple(names)))
        elif isinstance(n, Name) and n.name not in spec.constants and n.name not in ("pages", "readers") \
                and n.name != node.var and n.name not in dims and (n.name in spec.vars or n.name in spec.objects):
            reads.append((n.name, ()))  # a system variable: any write to it changes every term
    renamed = substitute(node.body, {**{name: Name(f"#{i}") for i, name in enumerate(ids)}, node.var: Name("#v")})
    text = f"{node.domain}:{render(renamed)}"
    return text, tuple(ids), tuple(dims[i] for i in ids), tuple(reads)


def collect(spec: Spec, exprs: Iterator[Expr]) -> dict[str, Aggregate]:
    """Canonical text -> aggregate, for every sum in ``exprs`` that has one."""
    out: dict[str, Aggregate] = {}
    for e in exprs:
        for n in walk(e):
            if isinstance(n, Reduce) and n.kind == "sum":
                found = shape(spec, n)
                if found is not None and found[0] not in out:
                    text, free, dims, reads = found
                    out[text] = Aggregate(f"@sum{len(out)}", n, free, dims, reads)
    return out


def spec_expressions(spec: Spec) -> Iterator[Expr]:
    """Every guard, effect value and property of the spec."""
    for ev in spec.events:
        yield ev.guard
        yield from (eff.value for eff in ev.effects)
    yield from (p.expr for p in spec.properties)
