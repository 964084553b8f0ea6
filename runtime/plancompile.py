"""Compiling a generated plan (fireplan.py, chainplan.py, proposeplan.py): its source compiled once per
process, the state columns it reads by name bound as globals of its own, which the store keeps current.

::

    cols['tail'][p]   a['tail'][p]   rcols['seq'][r]   a['block'][(r, p)]
         |                |                |                  |
       C_tail[p]       C_tail[p]        R_seq[r]        V_block[(r, p)]     one global read, no dict lookup
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import CodeType
from typing import Any

CODE: dict[tuple[str, str], CodeType] = {}  # plan source -> its code, shared by every manager of the process
_COLUMN = re.compile(r"(?<![\w.])(a|cols|rcols)\['(\w+)'\]")  # a state column read by name


def rewritten(text: str, scope: dict[str, Any]) -> str:
    """``text`` with each state column it reads by name (``cols['tail']``, ``a['tail']``, ``rcols['seq']``,
    ``a['block']``) read from a name of ``scope`` instead (``C_tail``, ``R_seq``, ``V_block``: one global
    read, no dict lookup a firing), which the store keeps current when it grows a column; and with the
    firing's reader and page bound in the names only where the plan hands them on (``late``).  The
    rewrite of a text is made once per process (every manager of a spec generates the same texts)."""
    store = scope.get("store")
    if store is None or scope.get("a") is not store.arrays or scope.get("cols") is not store.cols:
        return text
    found = _DONE.get(text)
    if found is None:
        names: dict[str, tuple[str, str]] = {}

        def one(m: re.Match[str]) -> str:
            kind, name = m.groups()
            if kind != "rcols" and name in store.cols:
                local, where = f"C_{name}", "cols"
            elif kind != "cols" and name in store.rcols:
                local, where = f"R_{name}", "rcols"
            elif kind == "a" and name in store.views:
                local, where = f"V_{name}", "views"
            else:
                return m.group(0)
            names[local] = (where, name)
            return local

        found = _DONE[text] = (late(_COLUMN.sub(one, text)), tuple((local, *at) for local, at in names.items()))
    for local, where, name in found[1]:
        scope[local] = getattr(store, where)[name]
    if found[1]:
        store.bind_columns(scope)
    return found[0]


_DONE: dict[str, tuple[str, tuple[tuple[str, str, str], ...]]] = {}  # a plan's text -> its rewrite, its columns
_WHOLE = ("(n,", "(n)", " n,", " n)")  # the names handed on as a whole (not one name read: n['x'])
_BINDS = re.compile(r"^( *)n\['[rp]'\] = [rp]$", re.MULTILINE)  # the firing's reader or page bound in the names


def late(text: str) -> str:
    """A plan's ``text`` with the firing's reader and page bound in the names (``n['r'] = r``,
    ``n['p'] = p``) only where the names are handed on as a whole: a refusal, a bound, a recorded step
    or a step check binds them as it hands them on (``at(r, p)``: fireplan.py), and the bindings become
    ``pass``.  A plan that hands the names on anywhere else (a domain's callable, the general bind)
    keeps its bindings.  The plan's own lines read ``r`` and ``p`` from its arguments, and what it calls
    binds the names it reads (``Incremental``, ``RuntimeNames.bind``, another plan)."""
    out = text.replace("r, p, n)", "r, p, at(r, p))")  # a refusal, a bound, a recorded step, a step check
    if "n = bind(" in out or any(form in out for form in _WHOLE):
        return text
    return _BINDS.sub(r"\1pass", out)


def compile_plan(fn: str, args: str, body: list[str], scope: dict[str, Any], event: str) -> Callable[..., Any]:
    """Compile the function ``fn(args)`` whose lines are ``body`` into ``scope`` (the code shared by every
    manager of the process; its columns bound and its names bound late: ``rewritten``) and return it."""
    text = rewritten(f"def {fn}({args}):\n" + "".join(f"    {line}\n" for line in body), scope)
    code = CODE.get((text, event))
    if code is None:
        code = CODE[(text, event)] = compile(text, f"<plan {event}>", "exec")
    exec(code, scope)  # noqa: S102 - source generated from the compiled event
    out: Callable[..., Any] = scope[fn]
    return out
