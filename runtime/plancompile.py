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


def bind_columns(text: str, scope: dict[str, Any]) -> str:
    """``text`` with each state column it reads by name (``cols['tail']``, ``a['tail']``, ``rcols['seq']``,
    ``a['block']``) read from a name of ``scope`` instead (``C_tail``, ``R_seq``, ``V_block``: one global
    read, no dict lookup a firing), which the store keeps current when it grows a column."""
    store = scope.get("store")
    if store is None or scope.get("a") is not store.arrays or scope.get("cols") is not store.cols:
        return text
    bound = False

    def one(m: re.Match[str]) -> str:
        nonlocal bound
        kind, name = m.groups()
        if kind != "rcols" and name in store.cols:
            local, column = f"C_{name}", store.cols[name]
        elif kind != "cols" and name in store.rcols:
            local, column = f"R_{name}", store.rcols[name]
        elif kind == "a" and name in store.views:
            local, column = f"V_{name}", store.views[name]
        else:
            return m.group(0)
        scope[local] = column
        bound = True
        return local

    text = _COLUMN.sub(one, text)
    if bound:
        store.bind_columns(scope)
    return text


def compile_plan(fn: str, args: str, body: list[str], scope: dict[str, Any], event: str) -> Callable[..., Any]:
    """Compile the function ``fn(args)`` whose lines are ``body`` into ``scope`` (the code shared by every
    manager of the process; the state columns it reads bound: ``bind_columns``) and return it."""
    text = bind_columns(f"def {fn}({args}):\n" + "".join(f"    {line}\n" for line in body), scope)
    code = CODE.get((text, event))
    if code is None:
        code = CODE[(text, event)] = compile(text, f"<plan {event}>", "exec")
    exec(code, scope)  # noqa: S102 - source generated from the compiled event
    out: Callable[..., Any] = scope[fn]
    return out
