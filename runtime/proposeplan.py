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

A ``when`` hook that is an ``Inline`` is tested in line (its source), not called; so is a ``then`` hook
that is a ``DataWork`` with a source (its statement run in line, its names bound in the plan).  The function's
``each(r, pages)`` makes the same proposals for each of ``pages`` in turn (one call for a write's
sealed pages); where every ``when`` is an ``Inline`` and every ``then`` a ``DataWork`` (the data plane's
work), nothing its loop calls begins, commits or rolls back a transaction (the watchers neither), so it
reads the journal and the firing log once and counts each event's firings at its end (in a ``finally``:
the firings before a proposal that raises included), one entry an event in the firing log.

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


class DataWork:
    """A ``then`` hook that is the data plane's work: it fires nothing and begins, commits or rolls back
    no transaction, so ``each`` reads the transaction once and counts its loop's firings at its end.
    ``source`` (optional): a statement of ``p`` over ``names`` (objects fixed for the plan's life) that
    does what ``fn`` does, run in line by the generated proposals instead of calling ``fn``."""

    __slots__ = ("fn", "source", "names")

    def __init__(self, fn: Hook, source: str = "", names: dict[str, Any] | None = None) -> None:
        self.fn, self.source, self.names = fn, source, names or {}

    def __call__(self, p: int) -> Any:
        return self.fn(p)

    @classmethod
    def inline(cls, source: str, names: dict[str, Any]) -> DataWork:
        """The hook whose work is ``source`` (a statement of ``p`` over ``names``), its function compiled
        from that same statement (called where the generated proposals cannot run it in line)."""
        scope = dict(names)
        exec(compile(f"def _work(p):\n    {source}\n", "<data work>", "exec"), scope)  # noqa: S102 - the caller's
        return cls(scope["_work"], source, names)                                        # own statement


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
    # ``each``: the journal and firing log read once and the firings counted after the loop, where every
    # hook is an ``Inline`` or ``DataWork`` (nothing in the loop changes the transaction)
    after = all(isinstance(hook, Inline) for hook in when.values()) and \
        all(isinstance(hook, DataWork) for hook in then.values())
    body, loop = ["got = 0"], []
    counts: dict[str, str] = {}  # each event's firings in the loop: a local count
    for i, ev in enumerate(events):
        t = f"_{i}"
        scope.update(ctx.scope(ev, t))
        lines = fire_lines(pipe, scope, ev, t, propose=True, recorded=False)
        checks = [f"if {owner_read(ev)} not in SOURCES{t}: return False", f"if not ({guard_source(ev)}): return False"]
        at = next((k for k in range(len(lines) - 1) if lines[k:k + 2] == checks), None)
        if at is None or any("return" in line for line in lines[:at] + lines[at + 2:]):
            return None  # not the shape this module rewrites
        test = f"if {owner_read(ev)} in SOURCES{t} and ({guard_source(ev)}):"
        fired = lines[at + 2:]
        work = [_then(i, then[i], scope)] if i in then else []
        body += _proposal(i, [*lines[:at], test, *(f"    {line}" for line in fired), f"    got |= {1 << i}",
                              *(f"    {line}" for line in work)], when, scope)
        if after:
            count = counts.setdefault(ev.name, f"k{t}")
            fired = [f"{count} += 1" if line == f"fired[{ev.name!r}] += 1" else line for line in fired
                     if line.strip() not in _TRANSACTION and line != f"if log is not None: log.append({ev.name!r})"]
            loop += _proposal(i, [*lines[:at], test, *(f"    {line}" for line in fired),
                                  *(f"    {line}" for line in work)], when, scope)
    name = "+".join(ev.name for ev in events)
    found = compile_plan("_proposals", "r, p", [*body, "return got"], scope, name)
    # ``found.each(r, pages)``: the same for each of ``pages`` in turn, in one call
    if not after:
        each = compile_plan("_each", "r, ps", ["for p in ps:", *(f"    {line}" for line in body)], scope, name)
    else:  # the counts added also when a proposal raises (for the firings before it)
        ends = [line for ev_name, count in counts.items() for line in (
            f"if {count}:", f"    fired[{ev_name!r}] += {count}",
            f"    if log is not None: log.append(({ev_name!r}, {count}))")]
        each = compile_plan("_each", "r, ps", [
            *_TRANSACTION, *(f"{count} = 0" for count in counts.values()),
            "try:", "    for p in ps:", *(f"        {line}" for line in loop), "finally:",
            *(f"    {line}" for line in ends)], scope, name)
    found.each = each  # type: ignore[attr-defined]
    return found  # type: ignore[no-any-return]


_TRANSACTION = ("j = store.journal", "log = pipe.fired_log")  # what a firing's lines read of the transaction


def _then(i: int, hook: Hook, scope: dict[str, Any]) -> str:
    """The line that runs event ``i``'s ``then`` hook once it fired: a ``DataWork``'s source in line
    (its names put in ``scope``) where it has one whose names the plan does not use, else a call."""
    t = f"_{i}"
    if isinstance(hook, DataWork) and hook.source and scope.keys().isdisjoint(hook.names):
        scope.update(hook.names)
        return hook.source
    scope[f"then{t}"] = hook
    return f"then{t}(p)"


def _proposal(i: int, block: list[str], when: dict[int, Hook], scope: dict[str, Any]) -> list[str]:
    """Event ``i``'s proposal lines ``block`` in its ``try`` (an effect out of its bounds refused and
    counted, the next event proposed), under its ``when`` test if it has one."""
    t = f"_{i}"
    block = ["try:", *(f"    {line}" for line in block), "except GuardRefused:", "    pass"]
    if i in when:
        hook = when[i]
        scope[f"when{t}"] = hook
        test = hook.source if isinstance(hook, Inline) else f"when{t}(p)"
        block = [f"if {test}:", *(f"    {line}" for line in block)]
    return block
