"""Generated source for the tracked quantifiers (incremental.py) inside a plan (fireplan.py, chainplan.py):
the value a guard asks for, and the upkeep after a firing, as ``Incremental.value`` and
``Incremental.after`` would do them, written out for the event at hand.

Asked for reader ``r``, a tracked value kept with nothing pending is read off its failing pages; one
pending page (what an ``open`` leaves: its page, at the frontier) is evaluated in line, as
``Incremental._recheck_many`` evaluates it (failing where the body is false and the page lies in
the reader's domain); anything else asks ``Incremental.value``::

    f = fails.get(r)                      kept?       pending?     the value
        None                              no          -            value(name, r)  (fresh)
        {..}, r not in pending            yes         none         not f
        {..}, pending[r] == {q}           yes         one page     q evaluated here, then not f
        {..}, pending[r] two or more      yes         many         value(name, r)

After a firing of ``ev`` for reader ``r`` on page ``p``, each action of ``Incremental.actions[ev]`` is
one test of what ``after`` reads first; only a test that holds does anything, and what it does is
``after``'s for that action alone (``Incremental.act``), except for marking a page pending, which is
written out::

    action                     test                                  then
    all                        fails                                 forget everything tracked
    keep_all, page             failing                               act (the failing pages at p)
    keep_all, rp               r in failing and p in fails[r]        act (p of r rechecked)
    keep_all, reader           r in failing                          act (r's failing pages)
    page (not keep_all)        a holder of p in fails                pending[holder][p]
    rp (not keep_all)          r in fails                            pending[r][p]
    reader, not keep_other     r in fails                            forget r
    reader, keep_other         r in fails                            act (r's failing pages and p)

Every action reads and writes only what ``after`` would, so running them one by one in the actions'
order leaves exactly what ``after`` leaves (its one-firing form, ``_after_one``, does the same).  Two
shortcuts keep it so: where an event has both, the page action leaves ``r`` itself to the rp action
(which marks the same page for it); and a chain (chainplan.py) whose appends or seal moved the
frontier past the page it opened evaluates that page for ``r`` at once (``settle``) rather than
leaving it pending: evaluated once either way, exact from then on, with no pending entry to make and
take apart at the next ``open``.
"""

from __future__ import annotations

import re
from typing import Any

from morphcache.spec.pycode import source

from .compiler import CompiledEvent

_RP_READ = re.compile(r"a\['([\w@]+)'\]\[\(r, (p|q_)\)\]")  # a (reader, page) read at the firing's reader


def direct_rp(text: str, store: Any, scope: dict[str, Any]) -> str:
    """``text`` with each read ``a['x'][(r, p)]`` of a reader's dict row made in line, as ``RPView``
    reads it (the row's value, the initial one where it has none), the view asked only for a row it
    keeps otherwise (in array form, or none)::

        a['block'][(r, p)]  ->  (_rw.get(p, 0) if (_rw := rprow_block.get(r)) is not None else a['block'][(r, p)])
    """
    def one(m: re.Match[str]) -> str:
        name, page = m.group(1), m.group(2)
        if name not in store.rp:
            return m.group(0)
        scope[f"rprow_{name}"] = store.rp[name]
        return (f"(_rw.get({page}, {int(store.init[name])}) if (_rw := rprow_{name}.get(r)) is not None "
                f"else {m.group(0)})")
    return _RP_READ.sub(one, text)


def _evaluate(inc: Any, tr: Any, scope: dict[str, Any], fails: str, failing: str) -> list[str] | None:
    """Lines evaluating the body of ``tr`` for reader ``r`` at page ``q_`` into the reader's failing
    pages ``fails`` (``failing``: the readers with any), as ``Incremental._recheck_many`` does; None
    for a body that reads more than the reader and the page (nested reductions: left to it)."""
    body = source(tr.node.body).replace("n['r']", "r").replace(f"n[{tr.var!r}]", "q_")
    if "n[" in body:
        return None
    body = direct_rp(body, inc.store, scope)
    domain = " or ".join(f"rp_has({v!r}, r, q_)" for v in tr.domain_vars)
    return [f"if not ({body}) and ({domain}): {fails}[q_] = None", f"else: {fails}.pop(q_, None)",
            f"if {fails}: {failing}.add(r)", f"else: {failing}.discard(r)"]


def ask_lines(inc: Any, name: str, scope: dict[str, Any], i: int, t: str) -> list[str]:
    """``n[name]`` := the tracked value ``name`` for reader ``r`` (see the module doc); the names it
    reads put in ``scope`` suffixed ``{i}{t}``."""
    tr = inc.tracked[name]
    k = f"{i}{t}"
    scope[f"tracked{k}"], scope[f"pending{k}"], scope[f"failing{k}"] = tr.fails, tr.pending, tr.failing
    ask = [f"n[{name!r}] = inc_value({name!r}, r)", "n['r'] = r", "n['p'] = p"]
    evaluate = _evaluate(inc, tr, scope, "f", f"failing{k}")
    if evaluate is None:  # Incremental.value alone
        return [f"f = tracked{k}.get(r)", f"if f is None or r in pending{k}:",
                *(f"    {line}" for line in ask), f"else: n[{name!r}] = not f"]
    return [f"f = tracked{k}.get(r)",
            f"if f is None or r in pending{k}:",
            f"    if f is not None and len(pending{k}[r]) == 1:",
            f"        q_ = pending{k}.pop(r).popitem()[0]",
            *(f"        {line}" for line in evaluate),
            f"        n[{name!r}] = not f",
            "    else:",
            *(f"        {line}" for line in ask),
            f"else: n[{name!r}] = not f"]


def upkeep_lines(inc: Any, store: Any, scope: dict[str, Any], ev: CompiledEvent, t: str = "",
                 settle: str | None = None) -> list[str]:
    """The tracked quantifiers brought up to date after a firing of ``ev`` for ``r`` on ``p`` (see the
    module doc); the names they read put in ``scope`` suffixed ``{j}{t}``.  ``settle``: a condition
    under which the page an action would leave pending for ``r`` is evaluated at once instead (a chain
    whose later firings moved the frontier past it: evaluated once either way, and no pending entry)."""
    out: list[str] = []
    actions = inc.actions.get(ev.name, [])
    own = {tr.name for tr, kind, keep_all, _ in actions if kind == "rp" and not keep_all}  # r's (r, p) covered
    for j, (tr, kind, keep_all, keep_other) in enumerate(actions):
        k = f"{j}{t}"
        scope[f"ufails{k}"], scope[f"ufailing{k}"], scope[f"upending{k}"] = tr.fails, tr.failing, tr.pending
        scope[f"uact{k}"] = inc.act(tr, kind, keep_all, keep_other)
        fails, failing, pending, act = f"ufails{k}", f"ufailing{k}", f"upending{k}", f"uact{k}(r, p)"
        if kind == "all":
            out.append(f"if {fails}: {act}")
        elif keep_all:
            test = {"page": failing, "rp": f"r in {failing} and p in {fails}[r]"}.get(kind, f"r in {failing}")
            out.append(f"if {test}: {act}")
        elif kind == "page":
            dvars = tr.domain_vars
            if len(dvars) == 1 and dvars[0] in store.rev:  # one holder a slot: read it, no set made
                scope[f"uholders{k}"] = store.rev[dvars[0]]
                other = " and h != r" if tr.name in own else ""  # r itself: its rp action's
                out += [f"if {fails}:", f"    h = uholders{k}.get(p)",
                        "    if h.__class__ is int:",
                        f"        if h in {fails}{other}: {pending}.setdefault(h, {{}})[p] = None",
                        f"    elif h is not None: {act}"]
            else:
                out.append(f"if {fails}: {act}")
        elif kind == "rp":
            mark = f"{pending}.setdefault(r, {{}})[p] = None"
            evaluate = _evaluate(inc, tr, scope, "fr_", failing) if settle else None
            if evaluate is None:
                out.append(f"if r in {fails}: {mark}")
            else:
                out += [f"fr_ = {fails}.get(r)", "if fr_ is not None:", f"    if {settle}:", "        q_ = p",
                        *(f"        {line}" for line in evaluate), f"    else: {mark}"]
        else:
            out.append(f"if r in {fails}: {act}")
    return out
