"""The object lifecycles as ``transitions`` machines, and the transition table compiled from them.

One class-level machine per object kind (``Machine(model=None)``: no model is ever added, so the
machine costs nothing per page).  Each transition's condition asks the caller's ``check`` closure,
which evaluates the event's compiled guard in the right views.  A trigger on a lightweight
``_Cursor`` (which only carries the current state) tells whether the event fires and where to.

The table backend answers the same question with a dict built *from these machines*
(``(event, source) -> target``) and calls ``check`` only when a transition exists; the conformance
test ``test_table_equals_machines`` compares both on every object, event, state and guard outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transitions import Machine

from .compiler import CompiledSpec

Check = Callable[[], bool]


class _Cursor:
    """A stand-in model: the current state of one object of one page, nothing else."""

    __slots__ = ("state",)

    def __init__(self, state: str) -> None:
        self.state = state


def _condition(event_data: Any) -> bool:
    check: Check = event_data.kwargs["check"]
    return bool(check())


def build_machines(cspec: CompiledSpec) -> dict[str, Machine]:
    """One ``transitions.Machine`` per object of the spec, conditions wired to the caller's check."""
    machines: dict[str, Machine] = {}
    for name, obj in cspec.spec.objects.items():
        m = Machine(model=None, states=list(obj.states), initial=obj.initial, auto_transitions=False,
                    send_event=True, ignore_invalid_triggers=True)
        for ev in obj.events:
            for src in ev.sources:
                m.add_transition(ev.name, src, ev.target, conditions=[_condition])
        machines[name] = m
    return machines


class MachineBackend:
    """Decides a firing by triggering the object's ``transitions`` machine."""

    def __init__(self, cspec: CompiledSpec) -> None:
        self.machines = build_machines(cspec)

    def decide(self, owner: str, event: str, state: str, check: Check) -> str | None:
        """The target state if ``event`` fires from ``state`` (``check`` says yes), else None."""
        cursor = _Cursor(state)
        fired = self.machines[owner].events[event].trigger(cursor, check=check)
        return cursor.state if fired else None


class TableBackend:
    """Decides a firing with a ``(owner, event, source) -> target`` table read off the machines."""

    def __init__(self, cspec: CompiledSpec) -> None:
        self.table: dict[tuple[str, str, str], str] = {}
        for owner, machine in build_machines(cspec).items():
            for ev_name, ev in machine.events.items():
                for src, transitions in ev.transitions.items():
                    for t in transitions:
                        self.table[(owner, ev_name, src)] = str(t.dest)

    def decide(self, owner: str, event: str, state: str, check: Check) -> str | None:
        """The target state if ``event`` fires from ``state`` (``check`` says yes), else None."""
        target = self.table.get((owner, event, state))
        if target is None or not check():
            return None
        return target
