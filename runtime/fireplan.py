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
``compile_plan`` (plancompile.py) then reads each column as a global of the plan's own and binds the
names' ``r`` and ``p`` only where the plan hands the names on; the guard's parts are guardplan.py's.
An event the plan does not cover (a '*' effect) keeps the general code.  A plan reads the watchers
when it is built: ``Pipeline.watch`` drops the plans built so far.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .compiler import CompiledEvent
from .guardplan import guard_lines, guard_parts, guard_source, hoisted, ids_of, indexed_part, inline
from .plancompile import CODE as _CODE  # every plan's source and code (kept under this name: tools read it)
from .plancompile import compile_plan
from .trackplan import ask_lines
from .trackplan import upkeep_lines as track_upkeep

__all__ = ["_CODE", "AllowPlan", "FirePlan", "PlanContext", "apply_lines", "bind_lines", "build_allowed",
           "build_fire", "compile_plan", "fire_lines", "guard_source", "hoisted", "inline", "owner_read",
           "upkeep_lines", "write_lines"]

FirePlan = Callable[[Any, Any, Any, Any], None]
AllowPlan = Callable[[Any, Any], bool]


def _binder(n: dict[str, Any]) -> Callable[[Any, Any], dict[str, Any]]:
    """``at(r, p)``: the names ``n`` with reader ``r`` and page ``p`` bound (a plan's, handed on)."""
    def at(r: Any, p: Any) -> dict[str, Any]:
        n["r"], n["p"] = r, p
        return n
    return at


class PlanContext:
    """What a generated plan reaches: the pipeline's stores, names, refusals and counters."""

    def __init__(self, pipe: Any, bounds: Callable[..., None], steps: Callable[..., None]) -> None:
        self.pipe = pipe
        self.bounds = bounds
        self.steps = steps
        self.at = _binder(pipe.names.n)

    def scope(self, ev: CompiledEvent, t: str = "") -> dict[str, Any]:
        """The names a plan of ``ev`` reads; the event's own (``ev``, ``guard``, ``SOURCES``) suffixed
        by ``t`` (a plan that chains several events gives each its own)."""
        pipe = self.pipe
        names, store = pipe.names, pipe.store
        return {
            "n": names.n, "a": store.arrays, "cols": store.cols, "rcols": store.rcols, "store": store,
            "set_rp": store.set_rp, "rp_value": store.rp_value, "rp_has": store.rp_has, "names": names,
            "bind": names.bind, "at": self.at, "inc_value": names.inc.value, f"ev{t}": ev,
            f"guard{t}": ev.guard, f"SOURCES{t}": pipe.sources[ev.name], "refusals": pipe.refusals,
            "bounds": self.bounds, "steps": self.steps, "recorder": pipe.recorder, "fired": pipe.fired, "pipe": pipe,
            "_ids": ids_of,
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
    """One write of ``name`` (index kind ``kind``), then its watchers (``w_<name>_<i><t>``); a page or
    reader column's journal entry is made by ``journal_lines`` before it (the column read by name:
    ``compile_plan`` binds it)."""
    if kind == "p":
        out, index = [f"cols[{name!r}][p] = {value}"], "p"
    elif kind == "r":
        out, index = [f"rcols[{name!r}][r] = {value}"], "r"
    else:
        out, index = [f"set_rp({name!r}, r, p, {value})"], "(r, p)"
    return out + [f"w_{name}_{i}{t}({index})" for i in range(watchers)]


def journal_lines(writes: list[tuple[str, str, str | None]]) -> list[str]:
    """The journal entries of a run of page and reader column writes ``(name, kind, old)`` (``old``: a
    local holding the value before, else the column is read), made at once before the run's writes
    (the entries and their order those of one ``set_page`` or ``set_reader`` a write)."""
    entries = []
    for name, kind, old in writes:
        index = "p" if kind == "p" else "r"
        column = "cols" if kind == "p" else "rcols"
        entries.append(f"({kind!r}, {name!r}, {index}, {old or f'{column}[{name!r}][{index}]'})")
    if len(entries) == 1:
        return [f"if j is not None: j.append({entries[0]})"]
    return [f"if j is not None: j += ({', '.join(entries)})"]


def apply_lines(pipe: Any, scope: dict[str, Any], ev: CompiledEvent, values: list[str], t: str = "",
                owner: bool = True, upkeep: bool = True, owner_old: str | None = None) -> list[str]:
    """Stage 5 of a firing of ``ev``: owner := target (``owner``: False where it is known to hold the
    target already and no watcher reads it; ``owner_old``: a local holding its value before), then each
    effect := ``values[i]``, journaled, each name's watchers told (put in ``scope``), the tracked
    quantifiers brought up to date (``upkeep``: False where the caller does it later).  A run of page
    and reader column writes ending at one with watchers (or at a (reader, page) write, which
    journals itself) has its journal entries made at once, before its writes."""
    owner_kind, effects = pipe.write_plan_of(ev.name)
    writes = [(ev.owner, owner_kind, repr(ev.target), owner_old)] if owner else []
    writes += [(eff.target, kind, value, None) for (eff, kind, _, _), value in zip(effects, values, strict=True)]
    body: list[str] = []
    run: list[tuple[str, str, str | None]] = []  # the run's writes: journaled first
    lines: list[str] = []
    journal = False  # ``j`` holds the store's journal (read again after a watcher: code of its own)

    def flush() -> None:
        if run:
            body.extend(journal_lines(run))
        body.extend(lines)
        run.clear()
        lines.clear()

    for name, kind, value, old in writes:
        found = pipe.watchers.get(name, ())
        for i, fn in enumerate(found):
            scope[f"w_{name}_{i}{t}"] = fn
        if kind in ("p", "r"):
            if not journal:
                flush()
                body.append("j = store.journal")
                journal = True
            if name in (w[0] for w in run):
                flush()
            run.append((name, kind, old))
        else:
            flush()
        lines.extend(write_lines(name, kind, value, len(found), t))
        if found or kind not in ("p", "r"):
            flush()
        journal = journal and not found
    flush()
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
    parts = [indexed_part(part, pipe.names.indexed, scope) for part in guard_parts(ev)]
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
    written = []
    for i, (eff, _kind, lo, hi) in enumerate(effects):
        scope[f"f{i}{t}"], scope[f"e{i}{t}"], scope[f"lo{i}{t}"], scope[f"hi{i}{t}"] = eff.fn, eff, lo, hi
        if values[i].strip("()").lstrip("-").isdigit() and all(b is None or isinstance(b, int) for b in (lo, hi)):
            value = int(values[i].strip("()"))  # a constant: its bounds checked here, once
            if (lo is None or value >= lo) and (hi is None or value <= hi):
                written.append(str(value))
                continue
        body.append(f"v{i} = {values[i]}")
        written.append(f"v{i}")
        test = " or ".join(([f"v{i} < lo{i}{t}"] if lo is not None else [])
                           + ([f"v{i} > hi{i}{t}"] if hi is not None else []))
        if test:
            body.append(f"if {test}: bounds(ev{t}, e{i}{t}, v{i}, r, p, n)")
    if recorded:
        body += ["rec = recorder.enabled", f"if rec: before = recorder.before(ev{t}, r, p, n)"]
    owner_old = "s" if not propose and pipe.write_plan_of(ev.name)[0] in ("p", "r") else None
    body += apply_lines(pipe, scope, ev, written, t, upkeep=upkeep, owner_old=owner_old)
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
    body = fire_lines(pipe, scope, ev, propose=propose, recorded=pipe.recorder.enabled)
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
