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
order leaves exactly what ``after`` leaves (its one-firing form, ``_after_one``, does the same).
"""

from __future__ import annotations

from typing import Any

from morphcache.spec.pycode import source

from .compiler import CompiledEvent


def ask_lines(inc: Any, name: str, scope: dict[str, Any], i: int, t: str) -> list[str]:
    """``n[name]`` := the tracked value ``name`` for reader ``r`` (see the module doc); the names it
    reads put in ``scope`` suffixed ``{i}{t}``."""
    tr = inc.tracked[name]
    k = f"{i}{t}"
    scope[f"tracked{k}"], scope[f"pending{k}"], scope[f"failing{k}"] = tr.fails, tr.pending, tr.failing
    body = source(tr.node.body).replace("n['r']", "r").replace(f"n[{tr.var!r}]", "q_")
    ask = [f"n[{name!r}] = inc_value({name!r}, r)", "n['r'] = r", "n['p'] = p"]
    if "n[" in body:  # reads more than the reader and the page: Incremental.value alone
        return [f"f = tracked{k}.get(r)", f"if f is None or r in pending{k}:",
                *(f"    {line}" for line in ask), f"else: n[{name!r}] = not f"]
    domain = " or ".join(f"rp_has({v!r}, r, q_)" for v in tr.domain_vars)
    return [f"f = tracked{k}.get(r)",
            f"if f is None or r in pending{k}:",
            f"    if f is not None and len(pending{k}[r]) == 1:",
            f"        q_ = pending{k}.pop(r).popitem()[0]",
            f"        if not ({body}) and ({domain}): f[q_] = None",
            "        else: f.pop(q_, None)",
            f"        if f: failing{k}.add(r)",
            f"        else: failing{k}.discard(r)",
            f"        n[{name!r}] = not f",
            "    else:",
            *(f"        {line}" for line in ask),
            f"else: n[{name!r}] = not f"]


def upkeep_lines(inc: Any, store: Any, scope: dict[str, Any], ev: CompiledEvent, t: str = "") -> list[str]:
    """The tracked quantifiers brought up to date after a firing of ``ev`` for ``r`` on ``p`` (see the
    module doc); the names they read put in ``scope`` suffixed ``{j}{t}``."""
    out: list[str] = []
    for j, (tr, kind, keep_all, keep_other) in enumerate(inc.actions.get(ev.name, [])):
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
                out += [f"if {fails}:", f"    h = uholders{k}.get(p)",
                        "    if h.__class__ is int:",
                        f"        if h in {fails}: {pending}.setdefault(h, {{}})[p] = None",
                        f"    elif h is not None: {act}"]
            else:
                out.append(f"if {fails}: {act}")
        elif kind == "rp":
            out.append(f"if r in {fails}: {pending}.setdefault(r, {{}})[p] = None")
        else:
            out.append(f"if r in {fails}: {act}")
    return out
