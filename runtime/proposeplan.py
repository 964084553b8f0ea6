"""One generated function for the proposals the runtime makes in turn on one page: a sealed page's
``begin_compress``, ``finish_compress``, ``build_index`` (``Morphology.maintain_many``), each event's
stages written as its own proposal plan's (fireplan.py), one after the other::

    def _proposals(r, p):
        got = 0
        if when0(p):                          (an event may have a runtime condition: a call)
            try:
                <bind>                        each event's proposal lines (fireplan.fire_lines):
                if <source> and <guard>:      refused: nothing written, nothing counted, next event
                    <bounds, writes, watchers, upkeep, counted>
                    got |= 1
                    then0(p)                  (a call after the event fired: the data plane's work)
            except GuardRefused:              an effect out of its bounds: refused and counted as
                pass                          alone, and the next event proposed as alone
        if when1(p): ...
        return got                            bit i: event i fired

A ``when`` hook that is an ``Inline`` is tested in line (its source), not called.  The function's
``each(r, pages)`` makes the same proposals for each of ``pages`` in turn (one call for a write's
sealed pages).

Each event's guard is evaluated against the state the proposals before it left, exactly as when each
is proposed alone (``Pipeline.propose``), in the same order.  Built only where each event has a
proposal plan of its own (fast path, no recording, no strict step checks, no '*' effect, no params);
otherwise ``Pipeline.proposals`` proposes them one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .compiler import CompiledEvent
from .errors import GuardRefused
from .fireplan import PlanContext, compile_plan, fire_lines, guard_source, owner_read

Hook = Callable[[int], Any]
ProposalsPlan = Callable[[Any, int], int]


class Inline:
    """A ``when`` hook the generated proposals test in line: ``source``, an expression of ``p`` over the
    plan's names (``cols``: the state store's page columns), the same test as ``fn`` (called where the
    proposals are made one by one)."""

    __slots__ = ("fn", "source")

    def __init__(self, fn: Hook, source: str) -> None:
        self.fn, self.source = fn, source

    def __call__(self, p: int) -> Any:
        return self.fn(p)


def build_proposals(pipe: Any, ctx: PlanContext, events: tuple[CompiledEvent, ...],
                    when: dict[int, Hook], then: dict[int, Hook]) -> ProposalsPlan | None:
    """The generated proposals of ``events`` in turn for ``r`` on ``p`` (see the module doc: event i
    proposed only where ``when[i](p)``, ``then[i](p)`` called after it fired), or None where one of
    them has no proposal plan of its own."""
    if not pipe.fast or pipe.strict or pipe.recorder.enabled:
        return None
    if any(ev.params or ev.observes or any(kind == "star" for _, kind, _, _ in pipe.write_plan(ev.name))
           for ev in events):
        return None
    scope: dict[str, Any] = {"GuardRefused": GuardRefused}
    body = ["got = 0"]
    for i, ev in enumerate(events):
        t = f"_{i}"
        scope.update(ctx.scope(ev, t))
        lines = fire_lines(pipe, scope, ev, t, propose=True, recorded=False)
        checks = [f"if {owner_read(ev)} not in SOURCES{t}: return False", f"if not ({guard_source(ev)}): return False"]
        at = next((k for k in range(len(lines) - 1) if lines[k:k + 2] == checks), None)
        if at is None or any("return" in line for line in lines[:at] + lines[at + 2:]):
            return None  # not the shape this module rewrites
        block = [*lines[:at], f"if {owner_read(ev)} in SOURCES{t} and ({guard_source(ev)}):",
                 *(f"    {line}" for line in lines[at + 2:]), f"    got |= {1 << i}"]
        if i in then:
            scope[f"then{t}"] = then[i]
            block.append(f"    then{t}(p)")
        block = ["try:", *(f"    {line}" for line in block), "except GuardRefused:", "    pass"]
        if i in when:
            hook = when[i]
            test = hook.source if isinstance(hook, Inline) else f"when{t}(p)"
            scope[f"when{t}"] = hook
            block = [f"if {test}:", *(f"    {line}" for line in block)]
        body += block
    name = "+".join(ev.name for ev in events)
    found = compile_plan("_proposals", "r, p", [*body, "return got"], scope, name)
    # ``found.each(r, pages)``: the same for each of ``pages`` in turn, in one call
    each = compile_plan("_each", "r, ps", _hoisted(body, when), scope, name)
    found.each = each  # type: ignore[attr-defined]
    return found  # type: ignore[no-any-return]


_TRANSACTION = ("j = store.journal", "log = pipe.fired_log")  # what a firing's lines read of the transaction


def _hoisted(body: list[str], when: dict[int, Hook]) -> list[str]:
    """The loop of ``each`` over ``body`` (one page's proposals), the transaction's journal and firing
    log read once before it and again after each ``then`` hook instead of before each write: only a
    ``begin``, ``commit`` or ``rollback`` changes them, which neither the generated lines nor their
    watchers make (a hook is any code: one called as a ``when`` keeps the reads where they are)."""
    if any(not isinstance(hook, Inline) for hook in when.values()):
        return ["for p in ps:", *(f"    {line}" for line in body)]
    lines = [*_TRANSACTION, "for p in ps:"]
    for line in body:
        text = line.strip()
        if text in _TRANSACTION or text == "got = 0" or text.startswith("got |= "):  # (``each`` returns nothing)
            continue
        lines.append(f"    {line}")
        if text.startswith("then_") and text.endswith("(p)"):
            indent = line[:len(line) - len(line.lstrip())]
            lines += [f"    {indent}{read}" for read in _TRANSACTION]
    return lines
