"""One generated function for the firings a long write makes on one page: a *chain* for reader ``r``
on page ``p``, each event's stages written as its own plan's (fireplan.py), one after the other::

    page (C = 4)    [ t0   t1   t2   t3 ]
    a fresh page    open(r, p)              when the write starts the page (``first``)
                    append(r, p) x k        k = the tokens it takes there, less the last one's seal
                    seal(r, p)              when it takes the page's last token (``last``)

    def _chain(r, p, first, k, last):
        if first:                            open: bind, source, guard, effects, bounds, writes,
            ...                              watchers, tracked upkeep, counted: fireplan's lines
        if k:                                the k appends as the repeat's ends decide them (batch.py
            d_frontier = (k - 1) * 1         run_ends): the source state once, every conjunct at the
            ok = s in SOURCES and (g1)       first firing and, when it reads a column each firing
                 and (g1 at the last) ...    steps, at the last (the column read + (k-1) * step),
            ...                              every effect's bounds at both; the values the last leaves
            else: repeat_each(ev, r, p, k)   written; refused: the k firings one by one
        if last:                             seal: its own plan's lines
            ...
        (open's tracked upkeep, last)        see below

Each event's guard is evaluated against the state the firings before it left, exactly as when each
is fired alone: nothing is decided for a later event before the earlier one has been applied.  The
head's upkeep of the tracked quantifiers (incremental.py) runs at the end of the chain when no later
event reads a tracked value: each upkeep rechecks, on the state it sees, every (reader, page) its
event may have changed, among them every page the event may have made false (an event proved to
keep true bodies true makes none; one proved to keep the other pages' makes only its own; any other
drops the reader's whole value), so the later events' upkeeps, which look at the pages recorded
false, and the head's, run last on the final state, together recheck everything the chain changed.  A
refusal raises what a single firing raises (open and seal are their own plans' lines; refused appends
are fired again one by one, as a refused repeat is).  A chain is built only when each event has a
plan of its own (fast path, no recording, no strict step checks, no '*' effect, no params) and the
repeated event's repeat is decided at its ends; otherwise ``Pipeline.chain`` fires one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from morphcache.spec.expr import Binary, Expr, Name

from .batchplan import AFFINE, Plan
from .compiler import CompiledEvent
from .fireplan import (
    PlanContext,
    apply_lines,
    bind_lines,
    compile_plan,
    fire_lines,
    hoisted,
    inline,
    owner_read,
    upkeep_lines,
)
from .irtools import replace_index

ChainPlan = Callable[[int, int, bool, int, bool], None]


class Tally(dict[str, int]):
    """Firings counted by event name, 0 for a name never counted: what every plan's ``fired[name] += k``
    writes.  A ``Counter`` would do the same, but its ``__delitem__``, written in Python, routes every
    item write through a slot wrapper (four times a plain dict's; a long write counts some 200)."""

    def __missing__(self, key: str) -> int:
        return 0


def _shifted(e: Expr, affine: dict[str, int], t: str) -> str:
    """``e`` at the last firing of a repeat: every read of a column the firings step, plus its step
    times the firings before the last (the local ``d_<name><t>``; as batch.py's ``_Shift``)."""
    marks = {name: f"#d_{name}{t}" for name in affine}
    shifted = replace_index(e, lambda i: Binary("+", i, Name(marks[i.name])) if i.name in marks else None)
    text = inline(shifted)
    for mark in marks.values():
        text = text.replace(f"n[{mark!r}]", mark[1:])
    return text


def repeat_lines(pipe: Any, scope: dict[str, Any], ev: CompiledEvent, plan: Plan, t: str) -> list[str]:
    """``k`` firings of ``ev`` for ``r`` on ``p`` (k >= 1), decided at the first and the last (see the
    module doc), else fired one by one (``repeat_each{t}``)."""
    body = bind_lines(pipe, ev, False, scope, t)
    body += [f"d_{name}{t} = (k - 1) * {inc}" for name, inc in plan.affine.items()]
    checks = []
    for c, klass in zip(ev.conjuncts, plan.conjuncts, strict=True):
        checks.append(f"({inline(c.expr)})")
        if klass == AFFINE:
            checks.append(f"({_shifted(c.expr, plan.affine, t)})")
    texts = [" and ".join(checks)]
    for eff, klass in zip(ev.effects, plan.effects, strict=True):
        texts += [inline(eff.expr), _shifted(eff.expr, plan.affine, t) if klass == AFFINE else ""]
    reads, (guard, *exprs) = hoisted(texts, pipe.store, scope)  # the firings' first state, read once
    body += [f"s = {owner_read(ev)}", *reads, f"ok = s in SOURCES{t}" + (f" and {guard}" if guard else ""), "if ok:"]
    values = []
    for i, (klass, (_, _, lo, hi)) in enumerate(zip(plan.effects, pipe.write_plan(ev.name), strict=True)):
        scope[f"lo{i}{t}"], scope[f"hi{i}{t}"] = lo, hi
        ends = [f"v{i}"]
        body.append(f"    v{i} = {exprs[2 * i]}")
        if klass == AFFINE:
            body.append(f"    w{i} = {exprs[2 * i + 1]}")
            ends.append(f"w{i}")
        for v in ends:
            test = " or ".join(([f"{v} < lo{i}{t}"] if lo is not None else [])
                               + ([f"{v} > hi{i}{t}"] if hi is not None else []))
            if test:
                body.append(f"    if {test}: ok = False")
        values.append(ends[-1])
    body.append("if ok:")
    same = pipe.sources[ev.name] == {ev.target} and ev.owner not in pipe.watchers  # the owner stays: unwritten
    body += [f"    {line}" for line in apply_lines(pipe, scope, ev, values, t, owner=not same)]
    body += [f"    fired[{ev.name!r}] += k", "    log = pipe.fired_log",
             f"    if log is not None: log.append(({ev.name!r}, k))", "    pipe.vector_firings += k",
             f"else: repeat_each{t}(ev{t}, r, p, k)"]
    return body


def build_chain(pipe: Any, ctx: PlanContext, head: CompiledEvent, repeated: CompiledEvent, plan: Plan | None,
                tail: CompiledEvent, repeat_each: Callable[[CompiledEvent, int, int, int], None]) -> ChainPlan | None:
    """The generated chain ``head; repeated x k; tail`` (see the module doc), or None when one of the
    events has no plan of its own or ``plan`` (the repeat's) is not decided at its ends."""
    events = (head, repeated, tail)
    if not pipe.fast or pipe.strict or pipe.recorder.enabled or plan is None or not plan.ends:
        return None
    if any(ev.params or ev.observes or any(kind == "star" for _, kind, _, _ in pipe.write_plan(ev.name))
           for ev in events):
        return None
    scope: dict[str, Any] = {}
    for ev, t in zip(events, ("_h", "_k", "_t"), strict=True):
        scope.update(ctx.scope(ev, t))
    scope["repeat_each_k"] = repeat_each
    later = not any(pipe.names.tracked_reads[ev.name] for ev in (repeated, tail))  # the head's upkeep at the end
    later = later and bool(upkeep_lines(pipe, {}, head))
    body = ["if first:"]
    body += [f"    {line}" for line in fire_lines(pipe, scope, head, "_h", recorded=False, upkeep=not later)]
    rest = ["if k:", *(f"    {line}" for line in repeat_lines(pipe, scope, repeated, plan, "_k")),
            "if last:", *(f"    {line}" for line in fire_lines(pipe, scope, tail, "_t", recorded=False))]
    if later:  # whatever the later events do, refused included: the head's upkeep on what they leave
        rest = ["try:", *(f"    {line}" for line in rest), "finally:",
                "    if first:", *(f"        {line}" for line in upkeep_lines(pipe, scope, head, "_h", "k or last"))]
    body += rest
    name = f"{head.name}+{repeated.name}+{tail.name}"
    return compile_plan("_chain", "r, p, first, k, last", body, scope, name)  # type: ignore[no-any-return]
