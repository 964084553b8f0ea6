"""Quantifiers over a reader's pages, maintained incrementally instead of re-evaluated per guard.

``open`` asks ``next_block_free(r)`` (every page of r's block table lies below r's frontier) each time
a sequence crosses a page boundary; evaluated afresh that is one body per page of the block table,
quadratic over a long prefill.  A *tracked* reduction ``all(body(r, q) for q in pages of r)`` keeps,
per reader it was asked about, the set of pages where the body is false::

    fails[r] = {q in r's pages : not body(r, q)}        value = fails[r] is empty

After each firing the pipeline calls ``after``; what the event wrote decides what is re-evaluated:

    wrote x[r, p] that the body or the domain reads      page p of reader r
    wrote x[p] that the body reads                       page p of every tracked reader holding it
    wrote x[r] that the body reads                       every page of r (r re-evaluated on the next ask)
    wrote anything else the body reads                   everything re-evaluated on the next ask

and of those pages only the failing ones when the event keeps every true body true (``keep_all``,
proved pointwise with Z3 by preserve.py), or the failing ones and its own page when it keeps every
other page's (``keep_other``).  After one firing, the page it wrote that an event not proved to
keep it may have changed is *pending* for its reader: evaluated when the value is next asked (an
``open`` puts its page at the frontier, so the page fails until the reader's next ``append``; asked
at the reader's next ``open``, it is evaluated once, not twice)::

    pending[r] = {q : body(r, q) not evaluated since an event wrote it}     (fails[r] exact elsewhere)

A rollback (journal restore, no events) forgets everything tracked.  ``check_integrity`` compares
every tracked value with a fresh evaluation.  This module is longer than most: the upkeep after a
batch and after one firing (the common case, without the batch's grouping) read best side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from morphcache.spec.expr import Index, Name, Reduce, walk
from morphcache.spec.pycode import compile_source
from morphcache.spec.vector import compile_vector

from .compiler import CompiledEvent, CompiledSpec
from .preserve import preserved
from .state import StateStore


class Tracked:
    """One tracked reduction and its failing pages per reader."""

    def __init__(self, cspec: CompiledSpec, name: str, node: Reduce) -> None:
        self.name = name
        self.node = node
        self.body = compile_source(node.body)
        self.vbody = compile_vector(node.body)
        dom = cspec.domains[node.domain]
        self.domain_vars = dom.vars
        self.var = node.var
        scopes = cspec.scopes
        self.page_reads: set[str] = set()
        self.reader_reads: set[str] = set()
        self.rp_reads: set[str] = set(dom.vars)
        self.other_reads: set[str] = set()
        for n in walk(node.body):
            if not isinstance(n, Index):
                continue
            args = [a.name if isinstance(a, Name) else None for a in n.args]
            scope = scopes.get(n.name)
            if scope == "page" and args == [self.var]:
                self.page_reads.add(n.name)
            elif scope == "reader" and args == ["r"]:
                self.reader_reads.add(n.name)
            elif scope == "reader_page" and args == ["r", self.var]:
                self.rp_reads.add(n.name)
            else:
                self.other_reads.add(n.name)
        self.fails: dict[int, dict[int, None]] = {}
        self.failing: set[int] = set()  # readers with a non-empty fails entry
        self.pending: dict[int, dict[int, None]] = {}  # reader -> pages evaluated when its value is asked


class Incremental:
    """Every tracked reduction of a compiled spec, maintained after each firing."""

    def __init__(self, cspec: CompiledSpec, store: StateStore, names: dict[str, Any]) -> None:
        self.cspec = cspec
        self.store = store
        self.names = names
        self.tracked = {name: Tracked(cspec, name, node) for name, node in cspec.tracked.items()}
        kinds: Any = cspec.memo.get("incremental")
        if kinds is None:
            kinds = cspec.memo["incremental"] = {ev.name: self._actions(ev) for ev in cspec.events.values()}
        self.actions: dict[str, list[tuple[Tracked, str, bool, bool]]] = {
            name: [(self.tracked[t], kind, all_, other) for t, kind, all_, other in acts]
            for name, acts in kinds.items()}
        self._mark = np.zeros(64, dtype=bool)  # reader-indexed scratch of ``_firings_of`` (False between calls)

    def _actions(self, ev: CompiledEvent) -> list[tuple[str, str, bool, bool]]:
        """``(tracked, what, keep_all, keep_other)`` for each tracked reduction ``ev`` can change: what it
        wrote ("rp", "page", "reader" or "all") and what it is proved to keep true (see the module doc)."""
        own = {"page": "p", "reader": "r"}.get(ev.scope, "r,p")
        writes = [(ev.owner, own)] + [(e.target, e.index) for e in ev.effects]
        out = []
        for t in self.tracked.values():
            kinds = set()
            for name, index in writes:
                if name in t.rp_reads and index == "r,p":
                    kinds.add("rp")
                elif name in t.page_reads and index == "p":
                    kinds.add("page")
                elif name in t.reader_reads and index == "r":
                    kinds.add("reader")
                elif name in t.rp_reads | t.page_reads | t.reader_reads | t.other_reads:
                    kinds.add("all")
            if not kinds:
                continue
            keep_all = preserved(self.cspec, ev, t.node)
            keep_other = keep_all or preserved(self.cspec, ev, t.node, other_pages_only=True)
            out += [(t.name, kind, keep_all, keep_other) for kind in sorted(kinds)]
        return out

    # -- values -----------------------------------------------------------------------------------
    def value(self, name: str, rid: Any) -> Any:
        """The tracked reduction ``name`` for reader ``rid`` (an id, or an array of ids)."""
        t = self.tracked[name]
        if isinstance(rid, np.ndarray):
            return np.fromiter((self.value(name, int(x)) for x in rid.tolist()), dtype=bool, count=len(rid))
        fails = t.fails.get(rid)
        if fails is None:
            t.pending.pop(rid, None)
            store = self.store  # a row in array form as its array; a dict row's pages as a list (no array made)
            pids = store.pages_array(t.domain_vars, rid) if store.in_array_form(t.domain_vars, rid) else \
                list(store.pages_of(t.domain_vars, rid))
            fails = t.fails[rid] = dict.fromkeys(self._failing_pages(t, rid, pids))
            if fails:
                t.failing.add(rid)
        elif rid in t.pending:
            self._recheck_many(t, rid, list(t.pending.pop(rid)))
        return not fails

    def direct(self, name: str, rid: Any) -> Any:
        """The tracked reduction evaluated afresh, nothing kept (the general path)."""
        t = self.tracked[name]
        if isinstance(rid, np.ndarray):
            return np.fromiter((self.direct(name, int(x)) for x in rid.tolist()), dtype=bool, count=len(rid))
        return all(self._holds(t, rid, q) for q in list(self._domain(t, rid)))  # page by page: independent

    def _domain(self, t: Tracked, rid: int) -> Iterable[int]:
        return self.store.pages_of(t.domain_vars, rid)

    def _failing_pages(self, t: Tracked, rid: int, pids: np.ndarray | list[int]) -> list[int]:
        """The pages of ``pids`` where the body is false for reader ``rid``: one vector evaluation over
        them all (a closure per page below 32 pages)."""
        if len(pids) < 32:
            return [q for q in (pids.tolist() if isinstance(pids, np.ndarray) else pids) if not self._holds(t, rid, q)]
        saved_r, saved_q = self.names.get("r"), self.names.get(t.var)
        self.names["r"] = rid
        self.names[t.var] = qs = np.asarray(pids, dtype=np.int64)
        try:
            holds = np.broadcast_to(np.asarray(t.vbody(self.names, self.store.varrays), dtype=bool), qs.shape)
        finally:
            self.names["r"], self.names[t.var] = saved_r, saved_q
        return qs[~holds].tolist()

    def _holds(self, t: Tracked, rid: int, q: int) -> bool:
        n = self.names
        n["r"] = rid
        n[t.var] = q
        return bool(t.body(n, self.store.arrays))

    def _recheck_many(self, t: Tracked, rid: int, pids: Sequence[int]) -> None:
        """The tracked failing pages of reader ``rid`` brought up to date at ``pids`` (a page failing when
        it is in the reader's domain and the body is false there): page by page, the bodies by the
        vector backend when there are many."""
        fails = t.fails.get(rid)
        if fails is None:
            return
        if len(pids) < 32:
            rp_has, dvars = self.store.rp_has, t.domain_vars
            n, body, arrays, var = self.names, t.body, self.store.arrays, t.var
            for q in pids:  # failing: false there (a body true anywhere needs no domain test), in the domain
                n["r"] = rid
                n[var] = q
                if not body(n, arrays) and (rp_has(dvars[0], rid, q) if len(dvars) == 1
                                            else any(rp_has(v, rid, q) for v in dvars)):
                    fails[q] = None
                    continue
                fails.pop(q, None)
            if fails:
                t.failing.add(rid)
            else:
                t.failing.discard(rid)
            return
        rows = [self.store.rp_row(v, rid) for v in t.domain_vars]
        names = dict(self.names, r=rid)
        names[t.var] = np.asarray(pids, dtype=np.int64)
        holds = np.broadcast_to(np.asarray(t.vbody(names, self.store.varrays), dtype=bool), (len(pids),)).tolist()
        for q, ok in zip(pids, holds, strict=True):
            if not ok and any(q in row for row in rows):
                fails[q] = None
            else:
                fails.pop(q, None)
        if fails:
            t.failing.add(rid)
        else:
            t.failing.discard(rid)

    # -- maintenance ------------------------------------------------------------------------------
    def after(self, ev: CompiledEvent, r: Any, p: Any) -> None:
        """Bring every tracked reduction up to date after ``ev`` fired for ``r`` on ``p`` (ids or arrays;
        an id ``r`` with an array ``p``: one reader on many pages)."""
        actions = self.actions.get(ev.name)
        if not actions:
            return
        if (r is None or r.__class__ is int) and p.__class__ is int:
            self._after_one(actions, r, p)
            return
        actions = [act for act in actions if act[0].fails and (act[0].failing or not act[2] or act[1] == "all")]
        if not actions:  # nothing tracked, or only true values the event keeps true
            return
        saved_r, saved_p = self.names.get("r"), self.names.get("p")
        keep = isinstance(r, np.ndarray) and isinstance(p, np.ndarray) and all(act[2] for act in actions)
        if keep and all(act[1] != "page" for act in actions):
            ps: list[int] = []  # unread: only the failing readers' pages are
        else:
            ps = p.tolist() if isinstance(p, np.ndarray) else ([] if p is None else [p])
        by_reader: dict[Any, list[int]]
        if keep:  # true bodies stay true: only the failing readers' firings are looked at (a decode step)
            by_reader = self._firings_of(set().union(*(act[0].failing for act in actions)), r, p)
        elif isinstance(r, np.ndarray):
            by_reader = {}
            for rid, pid in zip(r.tolist(), ps, strict=True):
                by_reader.setdefault(rid, []).append(pid)
        else:
            by_reader = {r: ps}
        for t, kind, keep_all, keep_other in actions:
            if not t.fails:
                continue
            if kind == "all":
                self._forget(t)
                continue
            if keep_all:  # true bodies stay true: only pages already failing can change
                self._recheck_failing(t, kind, by_reader, ps)
                continue
            todo: dict[int, list[int]] = {}
            if kind == "page":
                for pid in ps:
                    for holder in self.store.readers_at(t.domain_vars, pid):
                        if holder in t.fails:
                            todo.setdefault(holder, []).append(pid)
            else:
                todo = {rid: pids for rid, pids in by_reader.items() if rid in t.fails}
            for rid, pids in todo.items():
                if kind == "reader":
                    if not keep_other:
                        self._forget(t, rid)
                        continue
                    pids = list(dict.fromkeys(list(t.fails[rid]) + pids))
                if pids:
                    self._recheck_many(t, rid, pids)
        self.names["r"], self.names["p"] = saved_r, saved_p

    def _firings_of(self, rids: set[int], r: np.ndarray, p: np.ndarray) -> dict[int, list[int]]:
        """The pages each of ``rids`` fired on in the batch of readers ``r`` on pages ``p``: a few readers
        compared one at a time, more marked in a reader-indexed mask read once at the batch's readers."""
        out: dict[int, list[int]] = {}
        if len(rids) <= 1:
            for rid in rids:
                hit = r == rid
                if hit.any():
                    out[rid] = p[hit].tolist()
            return out
        want = np.fromiter(rids, dtype=np.int64, count=len(rids))
        size = max(int(want.max()), int(r.max())) + 1
        if len(self._mark) < size:
            self._mark = np.zeros(max(size, 2 * len(self._mark)), dtype=bool)
        mark = self._mark
        mark[want] = True
        at = np.flatnonzero(mark[r])
        mark[want] = False
        for rid, pid in zip(r[at].tolist(), p[at].tolist(), strict=True):
            out.setdefault(rid, []).append(pid)
        return out

    def _after_one(self, actions: list[tuple[Tracked, str, bool, bool]], r: int | None, p: int) -> None:
        """``after`` for one firing (reader ``r``, page ``p``): the same rechecks, page by page, each
        (reduction, reader, page) once (nothing changes between them)."""
        n = self.names
        saved_r, saved_p = n.get("r"), n.get("p")
        done: list[tuple[str, int]] = []  # (reduction, reader) rechecked: a few at most
        for t, kind, keep_all, keep_other in actions:
            if t.fails:
                self._act_one(t, kind, keep_all, keep_other, r, p, done)
        n["r"], n["p"] = saved_r, saved_p

    def act(self, t: Tracked, kind: str, keep_all: bool, keep_other: bool) -> Callable[[Any, int], None]:
        """``after`` for one firing (reader, page) and one of its event's actions alone (a generated
        plan's upkeep calls it where its test holds: trackplan.py)."""
        n = self.names

        def one(r: Any, p: int) -> None:
            saved_r, saved_p = n.get("r"), n.get("p")
            if t.fails:
                self._act_one(t, kind, keep_all, keep_other, r, p, [])
            n["r"], n["p"] = saved_r, saved_p
        return one

    def _act_one(self, t: Tracked, kind: str, keep_all: bool, keep_other: bool, r: int | None, p: int,
                 done: list[tuple[str, int]]) -> None:
        fails = t.fails
        if kind == "all":
            self._forget(t)
            return
        if keep_all:  # true bodies stay true: only pages already failing can change
            failing = t.failing
            if not failing:
                return
            if kind == "page":
                for rid in [rid for rid in failing if p in fails[rid]]:
                    self._recheck_once(t, rid, p, done)
            elif r in failing:
                if kind == "reader":
                    self._recheck_many(t, r, list(fails[r]))  # type: ignore[index]
                elif p in fails[r]:  # type: ignore[index]
                    self._recheck_once(t, r, p, done)  # type: ignore[arg-type]
            return
        if kind == "page":  # evaluated when the holder's value is next asked
            pending = t.pending
            for holder in self.store.readers_at(t.domain_vars, p):
                if holder in fails:
                    pending.setdefault(holder, {})[p] = None
        elif r in fails:
            assert r is not None
            if kind == "reader":
                if not keep_other:
                    self._forget(t, r)
                    return
                self._recheck_many(t, r, list(dict.fromkeys([*fails[r], p])))
            else:
                t.pending.setdefault(r, {})[p] = None

    def _recheck_once(self, t: Tracked, rid: int, p: int, done: list[tuple[str, int]]) -> None:
        key = (t.name, rid)
        if key not in done:
            done.append(key)
            self._recheck_many(t, rid, (p,))

    def _recheck_failing(self, t: Tracked, kind: str, by_reader: dict[Any, list[int]], ps: list[int]) -> None:
        """After an event that keeps every true body true: recheck the failing pages it touched."""
        if not t.failing:
            return
        if kind == "page":
            touched = set(ps)
            for rid in list(t.failing):
                hit = [q for q in t.fails[rid] if q in touched]
                if hit:
                    self._recheck_many(t, rid, hit)
            return
        for rid in [x for x in t.failing if x in by_reader]:
            fails = t.fails[rid]
            pids = list(fails) if kind == "reader" else [q for q in by_reader[rid] if q in fails]
            if pids:
                self._recheck_many(t, rid, pids)

    @staticmethod
    def _forget(t: Tracked, rid: int | None = None) -> None:
        """Drop what ``t`` tracks for reader ``rid`` (None: for every reader): evaluated afresh when asked."""
        if rid is None:
            t.fails.clear()
            t.failing.clear()
            t.pending.clear()
        else:
            t.fails.pop(rid, None)
            t.failing.discard(rid)
            t.pending.pop(rid, None)

    def forget_all(self) -> None:
        """Drop every tracked value (after a rollback restored values without events)."""
        for t in self.tracked.values():
            self._forget(t)

    def forget_reader(self, rid: int) -> None:
        """Drop what is tracked for a retired reader (its id may be reused)."""
        for t in self.tracked.values():
            self._forget(t, rid)

    def stale(self) -> list[str]:
        """Tracked values that disagree with a fresh evaluation (for check_integrity), the pending pages
        evaluated first (as an ask would)."""
        out = []
        for t in self.tracked.values():
            for rid in list(t.pending):
                self._recheck_many(t, rid, list(t.pending.pop(rid)))
            for rid, fails in list(t.fails.items()):
                fresh = {q for q in self._domain(t, rid) if not self._holds(t, rid, q)}
                if fresh != set(fails):
                    out.append(f"tracked {t.name} of reader #{rid}: failing pages {sorted(fails)}, "
                               f"fresh {sorted(fresh)}")
        return out
