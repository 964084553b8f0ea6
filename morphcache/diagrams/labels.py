"""Edge label text: ``event(r, p) [guard]`` plus one ``/ x := e`` line per effect.

Every piece of text comes from :func:`morphcache.spec.expr.render` applied to the parsed spec, so a
label can never disagree with the guard the proofs and the runtime use.  Long guards are wrapped on
`` and ``: the break goes right after ``and`` and the following space is dropped, so joining the
lines with one space gives back the rendered guard exactly (see :func:`unwrap`).
"""

from __future__ import annotations

from morphcache.spec.expr import Const, render
from morphcache.spec.model import Effect, Event

WIDTH = 40
_AND = " and "


def guard_text(event: Event) -> str | None:
    """The rendered guard, or None when the event has no guard (``true``)."""
    if isinstance(event.guard, Const) and event.guard.value is True:
        return None
    return render(event.guard)


def effect_target(effect: Effect) -> str:
    """How the effect's target is written in the spec: ``frontier``, ``fill[p]``, ``cslot[*]``."""
    return effect.target if effect.index is None else f"{effect.target}[{effect.index}]"


def effect_text(effect: Effect) -> str:
    """``target := value`` with the value rendered from the IR."""
    return f"{effect_target(effect)} := {render(effect.value)}"


def wrap_and(text: str, width: int = WIDTH) -> list[str]:
    """Split ``text`` into lines of about ``width`` characters, breaking only after `` and``."""
    parts = text.split(_AND)
    lines: list[str] = []
    current = parts[0]
    for part in parts[1:]:
        if len(current) + len(_AND) + len(part) > width:
            lines.append(current + " and")
            current = part
        else:
            current = current + _AND + part
    lines.append(current)
    return lines


def unwrap(lines: list[str]) -> str:
    """Undo :func:`wrap_and`: join the lines with one space."""
    return " ".join(lines)


def event_title(event: Event) -> str:
    """The event as it is called: ``open(r, p)``, ``offload(p)``, ``capture(r)``, ``tick``."""
    return f"{event.name}({', '.join(event.arg_names)})" if event.arg_names else event.name


def event_lines(event: Event, name: str | None = None, width: int = WIDTH) -> list[str]:
    """The label lines of an event's edge: ``name(args) [guard]`` (wrapped), then ``/ effect`` lines;
    an environment event (what the world does) is marked ``(env)``."""
    title = name if name is not None else event_title(event) + (" (env)" if event.env else "")
    guard = guard_text(event)
    lines = [title] if guard is None else wrap_and(f"{title} [{guard}]", width)
    lines.extend(f"/ {effect_text(eff)}" for eff in event.effects)
    return lines


def event_label(event: Event, name: str | None = None, width: int = WIDTH) -> str:
    """:func:`event_lines` joined with newlines (the DOT writer turns them into ``\\n``)."""
    return "\n".join(event_lines(event, name, width))
