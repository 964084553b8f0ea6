"""The names a compiled expression sees in the runtime: constants, the event's reader and page, its
params and observations, every runtime domain (a callable) and the page aggregates (maintained).

::

    C, W, CAPACITY, ...   the runtime's constants            pages     the longest block table (ids)
    r, p                  the acting reader and page          readers   the reader-id capacity
    @dom3                 callable: the readers with a block[s, p] entry at n["p"]    (domains.py)
    @agg0                 sum(1 if pool[q] == 'pooled' else 0 for q in pages), kept up to date as
                          pages' pool changes (a page's term looked up by its pool state)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from morphcache.spec.pycode import compile_source
from morphcache.spec.vector import per_binding

from .compiler import OBS, CompiledEvent, CompiledSpec
from .domains import LIVE_PAGES, LIVE_READERS, PAGE_READERS, READER_PAGES, Domain
from .errors import DomainError
from .holders import MANY, Holders
from .incremental import Incremental
from .irtools import encode_states
from .sparse import EMPTY
from .state import StateStore


class RuntimeNames:
    """One shared names mapping, re-bound for each firing (firings never nest)."""

    def __init__(self, cspec: CompiledSpec, store: StateStore, page_bound: int = 1 << 20, fast: bool = True) -> None:
        self.cspec = cspec
        self.fast = fast
        self.store = store
        self.n: dict[str, Any] = dict(cspec.constants)
        self.n["pages"] = page_bound
        self.n["readers"] = 1 << 30
        self.indexed: dict[str, tuple[Holders, str]] = {}
        for dom in cspec.domains.values():
            self.n[dom.name] = self._callable(dom)
        self.agg_body = {name: compile_source(self._encode(agg.body)) for name, agg in cspec.aggregates.items()}
        self.agg_contrib: dict[str, dict[int, int]] = {name: {} for name in cspec.aggregates}
        self.agg_dirty: set[int] = set()
        for name, agg in cspec.aggregates.items():
            self.n[name] = 0 if agg.kind == "sum" else agg.kind == "all"
        # aggregates over one object's state: a page's contribution looked up by its state code when it
        # changes (``dirty``); the others are evaluated at the next refresh
        self.agg_tabled: list[tuple[str, str, str, list[int]]] = []  # (aggregate, its object, kind, table)
        self.agg_deferred: list[str] = []
        for name, agg in cspec.aggregates.items():
            table = self._table(name)
            if table is None:
                self.agg_deferred.append(name)
            else:
                self.agg_tabled.append((name, next(iter(agg.reads)), agg.kind, table))
        self.inc = Incremental(cspec, store, self.n)
        self.tracked_reads = {name: tuple(sorted(set(ev.reads) & set(cspec.tracked)))
                              for name, ev in cspec.events.items()}

    def _encode(self, body: Any) -> Any:
        return encode_states(body, self.cspec.codes)

    # -- domains ----------------------------------------------------------------------------------
    def _callable(self, dom: Domain) -> Callable[[Mapping[str, Any]], Iterable[int]]:
        store, key = self.store, dom.key
        if dom.kind == LIVE_PAGES:
            return lambda n: store.live_pages
        if dom.kind == LIVE_READERS:
            return lambda n: store.live_readers
        names = dom.vars
        if dom.kind == READER_PAGES:
            if len(names) == 1:
                table, view = store.rp[names[0]], store.views[names[0]]

                def reader_pages(n: Mapping[str, Any]) -> Iterable[int]:
                    k = n[key]  # type: ignore[index]
                    if isinstance(k, np.ndarray):
                        return _union(store.rp_row(names[0], x) for x in np.unique(k).tolist())
                    row = table.get(k)
                    if row is None and k in view.only:  # a row in array form: its pages (those added too)
                        return store.pages_array(names, k).tolist()  # type: ignore[no-any-return]
                    return row or EMPTY

                return reader_pages

            def reader_pages_any(n: Mapping[str, Any]) -> Iterable[int]:
                k = n[key]  # type: ignore[index]
                ks = np.unique(k).tolist() if isinstance(k, np.ndarray) else [k]
                return _union(store.pages_of(names, x) for x in ks)

            return reader_pages_any
        assert dom.kind == PAGE_READERS

        def page_readers(n: Mapping[str, Any]) -> Iterable[int]:
            k = n[key]  # type: ignore[index]
            if isinstance(k, np.ndarray):
                return _union(store.readers_at(names, x) for x in np.unique(k).tolist())
            return store.readers_at(names, k)

        if len(names) == 1 and names[0] in store.rev:
            rev = store.rev[names[0]]
            self.indexed[dom.name] = (rev, key)  # type: ignore[assignment]  # (fireplan.py reads it in line)

            def page_readers_indexed(n: Mapping[str, Any]) -> Iterable[int]:
                k = n[key]  # type: ignore[index]
                if isinstance(k, np.ndarray):
                    return _union(_holders(rev.get(x)) for x in np.unique(k).tolist())
                return _holders(rev.get(k))

            def holder_pairs(n: Mapping[str, Any]) -> tuple[int, np.ndarray, np.ndarray] | None:
                k = n[key]  # type: ignore[index]
                if not isinstance(k, np.ndarray) or k.ndim != 1:
                    return None
                return _holder_pairs(rev, k)

            return per_binding(page_readers_indexed, holder_pairs)
        return page_readers

    def domain(self, dom: Domain, n: Mapping[str, Any]) -> Iterable[int]:
        """The ids ``dom`` ranges over under names ``n``."""
        return self.n[dom.name](n)  # type: ignore[no-any-return]

    # -- binding ----------------------------------------------------------------------------------
    def bind(self, ev: CompiledEvent, r: Any, p: Any, params: Mapping[str, int] | None,
             observed: Mapping[str, Any] | None) -> dict[str, Any]:
        """The names for firing ``ev`` for reader ``r`` on page ``p`` (aggregates brought up to date)."""
        n = self.n
        n["r"] = r
        n["p"] = p
        if self.agg_dirty and ev.reads & self.agg_contrib.keys():
            self.refresh()
        for name in self.tracked_reads[ev.name]:
            n[name] = self.inc.value(name, r) if self.fast else self.inc.direct(name, r)
            n["r"] = r
            n["p"] = p
        if ev.params:
            for prm in ev.params:
                value = (params or {}).get(prm.name)
                if isinstance(value, bool) or not isinstance(value, int) or not prm.min <= value <= prm.max:
                    raise DomainError(ev.name, None, None, "arguments", ev.guard_text,
                                      f"{prm.min} <= {prm.name} <= {prm.max}", f"{prm.name}={value!r}")
                n[prm.name] = value
        for ghost in ev.observes:
            if observed is None or ghost not in observed:
                raise DomainError(ev.name, p, None, "observations", ev.guard_text,
                                  f"the event measures '{ghost}'", f"no measurement of '{ghost}' was given")
            n[OBS + ghost] = observed[ghost]
        return n

    # -- aggregates -------------------------------------------------------------------------------
    def _table(self, name: str) -> list[int] | None:
        """Aggregate ``name``'s contribution of a page by the state code of the one object its body reads
        (its compiled body evaluated once per state), or None where it reads anything else."""
        agg = self.cspec.aggregates[name]
        if len(agg.reads) != 1 or next(iter(agg.reads)) not in self.store.cols:
            return None
        return aggregate_terms(self.cspec, name, self.agg_body[name])

    def dirty(self, index: Any) -> None:
        """A value an aggregate reads changed at page ``index`` (an id or an array of ids): a tabled
        aggregate takes the page's new contribution now (a page not live has its initial values, where
        the body is neutral, as ``refresh`` counts it); the others at the next refresh."""
        cols = self.store.cols
        if index.__class__ is int:  # one page (most writes): its term against the one it had, no list
            for name, var, kind, table in self.agg_tabled:
                contrib = self.agg_contrib[name]
                c, old = table[cols[var][index]], contrib.get(index, 0)
                if c != old:
                    if c:
                        contrib[index] = c
                    else:
                        del contrib[index]
                    self._moved(name, kind, c - old, contrib)
                elif kind != "sum":
                    self._moved(name, kind, 0, contrib)
            if self.agg_deferred:
                self.agg_dirty.add(index)
            return
        pids = np.atleast_1d(index).tolist()
        for name, var, kind, table in self.agg_tabled:
            col, contrib = cols[var], self.agg_contrib[name]
            delta = 0
            for pid in pids:  # each page's new term, against the one it had
                c = table[col[pid]]
                old = contrib.get(pid, 0)
                if c != old:
                    if c:
                        contrib[pid] = c
                    else:
                        del contrib[pid]
                    delta += c - old
            if delta or kind != "sum":
                self._moved(name, kind, delta, contrib)
        if self.agg_deferred:
            if isinstance(index, np.ndarray):
                self.agg_dirty.update(index.tolist())
            else:
                self.agg_dirty.add(index)

    def _moved(self, name: str, kind: str, delta: int, contrib: dict[int, int]) -> None:
        """Tabled aggregate ``name``'s terms moved by ``delta`` in all (``contrib``: its terms now)."""
        if kind == "sum":
            self.n[name] += delta
        else:
            self.n[name] = not contrib if kind == "all" else bool(contrib)

    def refresh(self) -> None:
        """Bring every aggregate that is not tabled up to date with the pages changed since the last
        refresh."""
        arrays = self.store.arrays
        live = self.store.live_pages
        for name in self.agg_deferred:
            agg = self.cspec.aggregates[name]
            body, contrib = self.agg_body[name], self.agg_contrib[name]
            total = self.n[name] if agg.kind == "sum" else sum(contrib.values())
            names: dict[str, Any] = {}
            for pid in self.agg_dirty:
                names[agg.var] = pid
                c = _contribution(agg.kind, body(names, arrays)) if pid in live else 0
                old = contrib.pop(pid, 0)
                if c:
                    contrib[pid] = c
                total += c - old if agg.kind == "sum" else 0
            if agg.kind == "sum":
                self.n[name] = total
            else:
                count = len(contrib)
                self.n[name] = count == 0 if agg.kind == "all" else count > 0
        self.agg_dirty.clear()

    def aggregate_witnesses(self, name: str) -> list[int]:
        """Pages whose contribution to aggregate ``name`` is not neutral."""
        if self.agg_dirty:
            self.refresh()
        return sorted(self.agg_contrib[name])


def aggregate_terms(cspec: CompiledSpec, name: str, body: Any = None) -> list[int] | None:
    """Aggregate ``name``'s term of a page by the state code of the one page object its body reads (its
    body evaluated once per state; ``body``, the body compiled, when at hand), or None where the body
    reads anything else."""
    agg = cspec.aggregates[name]
    var = next(iter(agg.reads)) if len(agg.reads) == 1 else None
    codes = cspec.codes.get(var) if var is not None else None
    if not codes or cspec.scopes.get(var) != "page":  # type: ignore[arg-type]
        return None
    if body is None:
        body = compile_source(encode_states(agg.body, cspec.codes))
    table = [0] * (max(codes.values()) + 1)
    for code in codes.values():
        table[code] = _contribution(agg.kind, body({agg.var: 0}, {var: [code]}))
    return table


def _contribution(kind: str, value: Any) -> int:
    """A page's term in a reduction of ``kind`` whose body there is ``value`` (0: neutral)."""
    return int(value) if kind == "sum" else int(not value) if kind == "all" else int(bool(value))


def _union(parts: Iterable[Iterable[int]]) -> list[int]:
    out: dict[int, None] = {}
    for part in parts:
        out.update(dict.fromkeys(part))
    return list(out)


def _holder_pairs(rev: Holders, pids: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """Each page of ``pids`` with each of its holders: ``(len(pids), at, readers)``, pair ``k`` reader
    ``readers[k]`` of page ``pids[at[k]]`` (a page's one holder read off its slot; shared pages' sets
    one by one)."""
    one = rev.vec[pids]
    at = np.flatnonzero(one >= 0)
    readers = one[at]
    shared = np.flatnonzero(one == MANY)
    if len(shared):
        more_at: list[int] = []
        more: list[int] = []
        many = rev.many
        for i, pid in zip(shared.tolist(), pids[shared].tolist(), strict=True):
            held = many[pid]
            more_at += [i] * len(held)
            more += held
        at = np.concatenate((at, np.asarray(more_at, dtype=np.int64)))
        readers = np.concatenate((readers, np.asarray(more, dtype=np.int64)))
    return len(pids), at, readers


def _holders(found: Any) -> Iterable[int]:
    """The readers a reverse-index entry names (an id, a set of ids, or nothing)."""
    if found is None:
        return ()
    return (found,) if found.__class__ is int else found
