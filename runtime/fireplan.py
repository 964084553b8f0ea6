"""One generated Python function per event for ``Pipeline.fire`` and ``Pipeline.allowed``: the same
stages as the pipeline's general code, unrolled for the event at hand.

The general code decides at every firing what it already knew when the spec was compiled: which
index the owner and each effect write (a page, a reader, a (reader, page) pair), which names the
event binds (tracked quantifiers, aggregates), which watchers each written name has, whether the
event changes a tracked quantifier.  A plan decides it once, writing the source below for the event
and compiling it, so that one firing is one call with straight-line code::

    drop(p)   def _fire(r, p, params, observed):
                  n['r'] = r; n['p'] = p                          bind
                  s = cols['tier'][p]                             1. source
                  if s not in SOURCES: raise source(ev, r, p, s)
                  if not ((a['pin'][p] == 0) and ...):            2. guard (its conjuncts' source)
                      raise refused(ev, r, p, n)
                  v0 = (a['gen'][p] + 1)                          3. effects on the pre-state
                  if v0 < 0: bounds(ev, e0, v0, r, p, n)          4. bounds (folded)
                  ... owner := target, then every effect, journaled, watchers told   5. apply
                  fired['drop'] += 1                              counted (undone with a rollback)

Every stage of the pipeline is there, in its order, with the same expressions (their generated
source inlined, reading ``r`` and ``p`` from the arguments), journal entries, watcher calls and
refusals; recording and the strict step checks are part of the plan too.
An event the plan does not cover (a '*' effect) keeps the general code.  A plan reads the watchers
when it is built: ``Pipeline.watch`` drops the plans built so far.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable
from types import CodeType
from typing import Any

from morphcache.spec.expr import Reduce, walk
from morphcache.spec.pycode import source

from .compiler import CompiledEvent
from .trackplan import ask_lines, direct_rp
from .trackplan import upkeep_lines as track_upkeep

FirePlan = Callable[[Any, Any, Any, Any], None]
AllowPlan = Callable[[Any, Any], bool]


def _ids(n: Any, domain: str, bound: dict[str, Any] | None = None) -> Any:
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


def guard_lines(parts: list[tuple[str, ...]], texts: list[str], refuse: str) -> list[str]:
    """The guard as statements: ``refuse`` (a ``return`` or ``raise``) where it fails; ``texts``: the
    parts' expressions as ``hoisted`` rewrote them."""
    out: list[str] = []
    for part, text in zip(parts, texts, strict=True):
        if part[0] == "expr":
            out.append(f"if not ({text}): {refuse}")
        elif part[0] == "all":
            out += [f"for {part[1]} in {part[2]}:", f"    if not ({text}): {refuse}"]
        else:
            out += [f"for {part[1]} in {part[2]}:", f"    if {text}: break", "else:", f"    {refuse}"]
    return out


class PlanContext:
    """What a generated plan reaches: the pipeline's stores, names, refusals and counters."""

    def __init__(self, pipe: Any, bounds: Callable[..., None], steps: Callable[..., None]) -> None:
        self.pipe = pipe
        self.bounds = bounds
        self.steps = steps

    def scope(self, ev: CompiledEvent, t: str = "") -> dict[str, Any]:
        """The names a plan of ``ev`` reads; the event's own (``ev``, ``guard``, ``SOURCES``) suffixed
        by ``t`` (a plan that chains several events gives each its own)."""
        pipe = self.pipe
        names, store = pipe.names, pipe.store
        return {
            "n": names.n, "a": store.arrays, "cols": store.cols, "rcols": store.rcols, "store": store,
            "set_rp": store.set_rp, "rp_value": store.rp_value, "rp_has": store.rp_has, "names": names,
            "bind": names.bind, "inc_value": names.inc.value, f"ev{t}": ev, f"guard{t}": ev.guard,
            f"SOURCES{t}": pipe.sources[ev.name], "refusals": pipe.refusals, "bounds": self.bounds,
            "steps": self.steps, "recorder": pipe.recorder, "fired": pipe.fired, "pipe": pipe, "_ids": _ids,
        }


def bind_lines(pipe: Any, ev: CompiledEvent, params: bool, scope: dict[str, Any], t: str = "") -> list[str]:
    """The names of the firing: ``names.bind`` unrolled (its general form when the event takes params
    or observations); a tracked value as ``Incremental.value`` gives it, read off the reader's failing
    pages where they are kept (trackplan.py: one pending page evaluated in line)."""
    names = pipe.names
    if params and (ev.params or ev.observes):
        return ["n = bind(ev, r, p, params, observed)"]
    out = ["n['r'] = r", "n['p'] = p"]
    if ev.reads & names.agg_contrib.keys():
        out.append("if names.agg_dirty: names.refresh()")
    for i, name in enumerate(names.tracked_reads[ev.name]):  # kept: its failing pages, one pending evaluated
        out += ask_lines(names.inc, name, scope, i, t)
    return out


def owner_read(ev: CompiledEvent) -> str:
    """The source reading the state code of ``ev``'s owner for reader ``r`` on page ``p``."""
    if ev.scope == "page":
        return f"cols[{ev.owner!r}][p]"
    if ev.scope == "reader":
        return f"rcols[{ev.owner!r}][r]"
    return f"rp_value({ev.owner!r}, r, p)"


def write_lines(name: str, kind: str, value: str, watchers: int, t: str = "") -> list[str]:
    """One journaled write of ``name`` (index kind ``kind``; a page or reader column's journal read into
    ``j`` before), then its watchers (``w_<name>_<i><t>``)."""
    if kind == "p":
        out = [f"c = cols[{name!r}]", f"if j is not None: j.append(('p', {name!r}, p, c[p]))", f"c[p] = {value}"]
        index = "p"
    elif kind == "r":
        out = [f"c = rcols[{name!r}]", f"if j is not None: j.append(('r', {name!r}, r, c[r]))", f"c[r] = {value}"]
        index = "r"
    else:
        out = [f"set_rp({name!r}, r, p, {value})"]
        index = "(r, p)"
    out += [f"w_{name}_{i}{t}({index})" for i in range(watchers)]
    return out


def apply_lines(pipe: Any, scope: dict[str, Any], ev: CompiledEvent, values: list[str], t: str = "",
                owner: bool = True, upkeep: bool = True) -> list[str]:
    """Stage 5 of a firing of ``ev``: owner := target (``owner``: False where it is known to hold the
    target already and no watcher reads it), then each effect := ``values[i]``, journaled, each name's
    watchers told (put in ``scope``), the tracked quantifiers brought up to date (``upkeep``: False
    where the caller does it later)."""
    owner_kind, effects = pipe.write_plan_of(ev.name)
    writes = [(ev.owner, owner_kind, repr(ev.target))] if owner else []
    writes += [(eff.target, kind, value) for (eff, kind, _, _), value in zip(effects, values, strict=True)]
    body: list[str] = []
    journal = False  # ``j`` holds the store's journal (read again after a watcher: code of its own)
    for name, kind, value in writes:
        found = pipe.watchers.get(name, ())
        for i, fn in enumerate(found):
            scope[f"w_{name}_{i}{t}"] = fn
        if kind in ("p", "r") and not journal:
            body.append("j = store.journal")
        body += write_lines(name, kind, value, len(found), t)
        journal = (journal or kind in ("p", "r")) and not found
    return body + (upkeep_lines(pipe, scope, ev, t) if upkeep else [])


def upkeep_lines(pipe: Any, scope: dict[str, Any], ev: CompiledEvent, t: str = "",
                 settle: str | None = None) -> list[str]:
    """The tracked quantifiers brought up to date after a firing of ``ev`` for ``r`` on ``p``: each action
    of the event tested in line, done only where it would do something (trackplan.py; ``settle`` as
    there)."""
    return track_upkeep(pipe.names.inc, pipe.store, scope, ev, t, settle)


def fire_lines(pipe: Any, scope: dict[str, Any], ev: CompiledEvent, t: str = "", propose: bool = False,
               recorded: bool = True, upkeep: bool = True) -> list[str]:
    """The stages of one firing of ``ev`` for ``r`` on ``p`` as straight-line source (see the module doc;
    ``propose``: a source state or guard that refuses returns False; ``recorded``: False for a plan
    built only while recording is off; ``upkeep``: as ``apply_lines``), every name of the event's own
    in ``scope`` suffixed by ``t``."""
    _, effects = pipe.write_plan_of(ev.name)
    body = bind_lines(pipe, ev, not propose, scope, t)
    parts = guard_parts(ev)
    reads, texts = hoisted([*(part[-1] for part in parts), *(inline(eff.expr) for eff, _, _, _ in effects)],
                           pipe.store, scope)
    guard, values = texts[:len(parts)], texts[len(parts):]
    if propose:
        body = ["params = None", *body, f"if {owner_read(ev)} not in SOURCES{t}: return False", *reads,
                *guard_lines(parts, guard, "return False")]
    else:
        body += [f"s = {owner_read(ev)}", f"if s not in SOURCES{t}: raise refusals.source(ev{t}, r, p, s)", *reads,
                 *guard_lines(parts, guard, f"raise refusals.guard(ev{t}, r, p, n)")]
    if pipe.strict:
        body.append(f"steps(ev{t}, r, p, n)")
    for i, (eff, _kind, lo, hi) in enumerate(effects):
        scope[f"f{i}{t}"], scope[f"e{i}{t}"], scope[f"lo{i}{t}"], scope[f"hi{i}{t}"] = eff.fn, eff, lo, hi
        body.append(f"v{i} = {values[i]}")
        test = " or ".join(([f"v{i} < lo{i}{t}"] if lo is not None else [])
                           + ([f"v{i} > hi{i}{t}"] if hi is not None else []))
        if test:
            body.append(f"if {test}: bounds(ev{t}, e{i}{t}, v{i}, r, p, n)")
    if recorded:
        body += ["rec = recorder.enabled", f"if rec: before = recorder.before(ev{t}, r, p, n)"]
    body += apply_lines(pipe, scope, ev, [f"v{i}" for i in range(len(effects))], t, upkeep=upkeep)
    body += [f"fired[{ev.name!r}] += 1", "log = pipe.fired_log", f"if log is not None: log.append({ev.name!r})"]
    if recorded:
        body.append(f"if rec: recorder.after(ev{t}, r, p, params, before)")
    return body


def build_fire(pipe: Any, ctx: PlanContext, ev: CompiledEvent, propose: bool = False) -> FirePlan | None:
    """The generated ``fire`` of ``ev`` (None for an event with a '*' effect: the general code).
    ``propose``: the generated ``propose`` instead (``r, p``; the same stages, but a source state or a
    guard that refuses returns False, nothing written and no refusal counted, as ``allowed`` would
    answer; a firing returns True; None also for an event that takes params or observations)."""
    _, effects = pipe.write_plan_of(ev.name)
    if any(kind == "star" for _, kind, _, _ in effects) or (propose and (ev.params or ev.observes)):
        return None
    scope = ctx.scope(ev)
    body = fire_lines(pipe, scope, ev, propose=propose)
    if propose:
        return compile_plan("_propose", "r, p", [*body, "return True"], scope, ev.name)  # type: ignore[return-value]
    return compile_plan("_fire", "r, p, params, observed", body, scope, ev.name)  # type: ignore[return-value]


def build_allowed(pipe: Any, ctx: PlanContext, ev: CompiledEvent) -> AllowPlan | None:
    """The generated ``allowed`` of ``ev``: source state and guard, nothing written (None for an event
    that takes params or observations: the general code)."""
    if ev.params or ev.observes:
        return None
    scope = ctx.scope(ev)
    body = [f"if {owner_read(ev)} not in SOURCES: return False", *bind_lines(pipe, ev, False, scope),
            f"return bool({guard_source(ev)})"]
    return compile_plan("_allowed", "r, p", body, scope, ev.name)  # type: ignore[return-value]


_CODE: dict[tuple[str, str], CodeType] = {}  # plan source -> its code, shared by every manager of the process


def compile_plan(fn: str, args: str, body: list[str], scope: dict[str, Any], event: str) -> Callable[..., Any]:
    """Compile the function ``fn(args)`` whose lines are ``body`` into ``scope`` (the code shared by every
    manager of the process) and return it."""
    text = f"def {fn}({args}):\n" + "".join(f"    {line}\n" for line in body)
    code = _CODE.get((text, event))
    if code is None:
        code = _CODE[(text, event)] = compile(text, f"<plan {event}>", "exec")
    exec(code, scope)  # noqa: S102 - source generated from the compiled event
    out: Callable[..., Any] = scope[fn]
    return out
