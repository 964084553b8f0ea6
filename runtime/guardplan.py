"""The guard of a generated plan (fireplan.py): its conjuncts' source inlined, reading the firing's
reader and page from the plan's arguments, the state reads it makes more than once made once, an
``all``/``any`` with no reduction inside written as a loop (over the readers holding the page read
off its reverse index where the domain is one), a run of conjuncts that is the constant true dropped.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Any

from morphcache.spec.expr import Reduce, walk
from morphcache.spec.pycode import source

from .compiler import CompiledEvent
from .trackplan import direct_rp


def ids_of(n: Any, domain: str, bound: dict[str, Any] | None = None) -> Any:
    """The ids a reduction in an inlined expression ranges over (as the generated expressions' own)."""
    ids = n[domain]
    if callable(ids):
        ids = ids({**n, **bound} if bound else n)
    return range(ids) if isinstance(ids, int) else ids


@functools.lru_cache(maxsize=4096)
def inline(e: Any, bound: tuple[str, str] | None = None) -> str:
    """The generated source of a compiled expression, reading the event's reader and page from the
    plan's arguments (the names hold the same values: the plan bound them first); ``bound``: a
    quantifier's variable and the local that holds it, replaced first (the variable may be named r or p)."""
    text = source(e) if bound is None else source(e).replace(f"n[{bound[0]!r}]", bound[1])
    return text.replace("n['r']", "r").replace("n['p']", "p")


_READ = re.compile(r"a\[('[\w@]+')\]\[(r|p|\(r, p\))\]")  # a state read at the firing's reader and page


def hoisted(texts: list[str], store: Any = None, scope: dict[str, Any] | None = None) -> tuple[list[str], list[str]]:
    """The reads of state at ``r``, ``p`` or ``(r, p)`` made more than once in ``texts`` (the inlined
    expressions one firing evaluates before it writes anything: its guard and effects, which read one
    state), each made once into a local (``x<i> = a['fill'][p]``), and the texts reading the locals::

        (a['fill'][p] < 15) and ((a['fill'][p] + d) < 15)   ->   x0 = a['fill'][p]
                                                                 (x0 < 15) and ((x0 + d) < 15)
    """
    counts = Counter(m.group(0) for text in texts for m in _READ.finditer(text))
    lines: list[str] = []
    for read, count in sorted(counts.items()):
        if count > 1:
            local = f"x{len(lines)}"
            lines.append(f"{local} = {read}")
            texts = [text.replace(read, local) for text in texts]
    if store is not None and scope is not None:  # (reader, page) reads of dict rows in line (trackplan.py)
        lines, texts = [direct_rp(x, store, scope) for x in lines], [direct_rp(x, store, scope) for x in texts]
    return lines, texts


def guard_source(ev: CompiledEvent) -> str:
    """The event's guard inlined: its conjuncts, in order, short-circuiting as the compiled guard."""
    return " and ".join(f"({inline(c.expr)})" for c in ev.conjuncts) or "True"


def guard_parts(ev: CompiledEvent) -> list[tuple[str, ...]]:
    """The event's guard inlined as the plan evaluates it: runs of conjuncts as one expression
    (``("expr", text)``), and a conjunct that is an ``all``/``any`` with no reduction inside as a loop
    (``(kind, local, ids, body)``), in the conjuncts' order, short-circuiting as the compiled guard,
    with no generator built::

        all(implies(block[s, p] == 'in', ...) for s in readers)   ->   for _s0 in _ids(n, '@dom3', None):
                                                                         if not (body): <refuse>
    """
    parts: list[tuple[str, ...]] = []
    run: list[str] = []
    for c in ev.conjuncts:
        e = c.expr
        if isinstance(e, Reduce) and e.kind in ("all", "any") and not any(
                isinstance(x, Reduce) for x in walk(e.body)):
            if run:
                parts.append(("expr", " and ".join(run)))
                run = []
            local = f"_{e.var}0"
            parts.append((e.kind, local, f"_ids(n, {e.domain!r}, None)", inline(e.body, (e.var, local))))
        else:
            run.append(f"({inline(e)})")
    if run or not parts:
        parts.append(("expr", " and ".join(run) or "True"))
    return parts


def indexed_part(part: tuple[str, ...], indexed: dict[str, tuple[Any, str]], scope: dict[str, Any]) -> tuple[str, ...]:
    """A guard part whose loop ranges over the readers holding the firing's page (or reader) as a reverse
    index gives them (``RuntimeNames.indexed``), read off the index in line (``Holders.get``: one
    reader, a set, or None), not through the domain's callable::

        _ids(n, '@dom10', None)  ->  (() if (h_ := hold_dom10(p)) is None else (h_,) if h_.__class__ is int else h_)
    """
    if part[0] == "expr" or not part[2].startswith("_ids(n, '@"):
        return part
    domain = part[2][len("_ids(n, '"):-len("', None)")]
    found = indexed.get(domain)
    if found is None or found[1] not in ("r", "p") or not domain[1:].isidentifier():
        return part
    local = f"hold_{domain[1:]}"
    scope[local] = found[0].get
    ids = f"(() if (h_ := {local}({found[1]})) is None else (h_,) if h_.__class__ is int else h_)"
    return (part[0], part[1], ids, part[3])


def guard_lines(parts: list[tuple[str, ...]], texts: list[str], refuse: str) -> list[str]:
    """The guard as statements: ``refuse`` (a ``return`` or ``raise``) where it fails; ``texts``: the
    parts' expressions as ``hoisted`` rewrote them."""
    out: list[str] = []
    for part, text in zip(parts, texts, strict=True):
        if part[0] == "expr":
            if text.strip("()") not in ("1", "True"):  # a guard that is the constant true: nothing to test
                out.append(f"if not ({text}): {refuse}")
        elif part[0] == "all":
            out += [f"for {part[1]} in {part[2]}:", f"    if not ({text}): {refuse}"]
        else:
            out += [f"for {part[1]} in {part[2]}:", f"    if {text}: break", "else:", f"    {refuse}"]
    return out
