"""Recording of executed steps for the independent conformance checker.

A step is one event fired for a reader on a page, with the state before and after it *projected* on
the pages and readers the step involves, renumbered ``0..``::

    runtime    attach(r=reader 'b' (#4), p=page 17)        pages 3, 9, 17 ...   readers 0 .. 6
    recorded   attach(r=0, p=1)   pages [9, 17] + 1 untouched page, readers [#4]
               slots  frontier[r0], block[r0,0], block[r0,1], tail[0], tail[1], tail[2], ...

What a step involves: its reader and page, every element where one of its quantifiers has a body
that is not neutral (the witnesses: the pooled pages an admission counts), and its neighbours (the
readers holding the page, the pages in the reader's block table; a few of each), which make the check
stronger and change nothing.  Every other page and reader is neutral there (``domains.py``), so the
projection decides the guard and the effects exactly as the whole state does.  Untouched pages are
added while a bound or guard reading ``pages`` needs them (a page at depth 5 needs six pages).
Ghost slots are left out; the checker (``morphcache.proofs.conformance.check_step``) leaves them
free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from morphcache.spec.expr import Expr, Name, Reduce, walk
from morphcache.spec.interp import Compiled
from morphcache.spec.pycode import compile_source

from .compiler import CompiledEvent, CompiledSpec
from .irtools import NEUTRAL, free_names
from .state import StateStore

if TYPE_CHECKING:
    from .names import RuntimeNames

MAX_PAD = 4096
NEIGHBOURS = 4  # readers of a page (pages of a reader: twice as many) added to a projection


@dataclass(frozen=True)
class Step:
    """One recorded transition: ``event(args)`` took ``before`` to ``after`` (projected states)."""

    event: str
    view: str
    args: dict[str, int]
    before: dict[str, Any]
    after: dict[str, Any]


@dataclass
class _Projection:
    pages: list[int]
    readers: list[int]
    size: int
    before: dict[str, Any] = field(default_factory=dict)


class Recorder:
    """Collects projected steps while ``enabled``; keeps at most ``limit`` (oldest dropped first)."""

    def __init__(self, cspec: CompiledSpec, store: StateStore, names: RuntimeNames, enabled: bool = False,
                 limit: int = 1_000_000) -> None:
        self.cspec = cspec
        self.store = store
        self.names = names
        self.enabled = enabled
        self.limit = limit
        self.steps: list[Step] = []
        self.dropped = 0
        self.marks: list[int] = []
        self._bodies: dict[int, Compiled] = {}
        self._bounded = [(name, self.cspec.bounds[name]) for name in self.cspec.bounds
                         if name in self.cspec.scopes]

    # -- transactions -----------------------------------------------------------------------------
    def mark(self) -> None:
        """Remember where a transaction starts."""
        self.marks.append(len(self.steps))

    def unmark(self, keep: bool) -> None:
        """End a transaction: keep its steps, or drop them (rolled back)."""
        start = self.marks.pop()
        if not keep:
            del self.steps[start:]

    # -- steps ------------------------------------------------------------------------------------
    def before(self, ev: CompiledEvent, r: int | None, p: int | None, n: dict[str, Any]) -> _Projection:
        """Project the state before ``ev`` fires (call with the firing's names bound)."""
        pages: dict[int, None] = {} if p is None else {p: None}
        readers: dict[int, None] = {} if r is None else {r: None}
        exprs: list[Expr] = [ev.conjuncts[i].expr for i in range(len(ev.conjuncts))]
        exprs += [e.expr for e in ev.effects]
        for e in exprs:
            self._witnesses(e, dict(n), pages, readers)
        store = self.store
        if p is not None:
            readers.update(dict.fromkeys(sorted(store.readers_at(store.rp_names, p))[:NEIGHBOURS]))
        if r is not None:
            pages.update(dict.fromkeys(sorted(store.pages_of(("block",), r))[:2 * NEIGHBOURS]))
        proj = _Projection(sorted(pages), sorted(readers), 0)
        proj.size = self._size(ev, proj, n)
        proj.before = self._snapshot(proj)
        return proj

    def after(self, ev: CompiledEvent, r: int | None, p: int | None, params: Any, proj: _Projection) -> None:
        """Record the step, with the state after it on the same projection."""
        args: dict[str, int] = {}
        if r is not None and ev.takes_reader:
            args["r"] = proj.readers.index(r)
        if p is not None and ev.takes_page:
            args["p"] = proj.pages.index(p)
        args.update(params or {})
        view = f"reader #{r}" if r is not None else f"page {p}"
        self.steps.append(Step(ev.name, view, args, proj.before, self._snapshot(proj)))
        if len(self.steps) > self.limit:
            del self.steps[0]
            self.dropped += 1

    def take(self) -> list[Step]:
        """Return the recorded steps and start a new recording."""
        out, self.steps = self.steps, []
        return out

    # -- projection -------------------------------------------------------------------------------
    def _witnesses(self, e: Expr, n: dict[str, Any], pages: dict[int, None], readers: dict[int, None]) -> None:
        """Add to ``pages``/``readers`` every element where a reduction of ``e`` has a non-neutral body."""
        for name in free_names(e):
            if name in self.cspec.aggregates:
                pages.update(dict.fromkeys(self.names.aggregate_witnesses(name)))
        for node in walk(e):
            if not isinstance(node, Reduce) or not self._free_in(node, n):
                continue
            body = self._body(node)
            over_pages = self.cspec.domains[node.domain].kind in ("reader_pages", "live_pages")
            for i in list(self.names.n[node.domain](n)):
                n[node.var] = i
                value = body(n, self.store.arrays)
                neutral = NEUTRAL[node.kind]
                if (value != 0) if node.kind == "sum" else (bool(value) != neutral):
                    (pages if over_pages else readers)[i] = None
                    self._witnesses(node.body, dict(n), pages, readers)

    def _free_in(self, node: Reduce, n: dict[str, Any]) -> bool:
        return all(name in n for name in free_names(node))

    def _body(self, node: Reduce) -> Compiled:
        fn = self._bodies.get(id(node))
        if fn is None:
            fn = self._bodies[id(node)] = compile_source(node.body)
        return fn

    def _size(self, ev: CompiledEvent, proj: _Projection, n: dict[str, Any]) -> int:
        """The fewest pages (at least those projected) with every bound and ``pages``-reading conjunct as
        in the runtime."""
        store, size = self.store, max(len(proj.pages), 1)
        checks = [c for c in ev.conjuncts if "pages" in free_names(c.expr)]
        bounds = [(name, lo, hi) for name, (lo, hi) in self._bounded
                  if not isinstance(hi, int) or not isinstance(lo, (int, type(None)))]
        values: list[tuple[str, int]] = []
        for name, _, _ in bounds:
            scope = self.cspec.scopes[name]
            if scope == "page":
                values += [(name, store.page(name, q)) for q in proj.pages]
            elif scope == "reader":
                values += [(name, store.reader(name, x)) for x in proj.readers]
            else:
                values += [(name, store.rp_value(name, x, q)) for x in proj.readers for q in proj.pages]
        values += self._effect_values(ev, n)
        while size < MAX_PAD:
            env = dict(self.cspec.constants, pages=size)
            ok = all(_within(self.cspec.bounds[name], value, env) for name, value in values)
            if ok and checks:
                saved = n["pages"]
                n["pages"] = size
                ok = all(c.fn(n, store.arrays) for c in checks)
                n["pages"] = saved
            if ok:
                return size
            size += 1
        return size

    def _effect_values(self, ev: CompiledEvent, n: dict[str, Any]) -> list[tuple[str, int]]:
        out = []
        for eff in ev.effects:
            if eff.star is None and eff.target in self.cspec.bounds:
                out.append((eff.target, eff.fn(n, self.store.arrays)))
        return out

    def _snapshot(self, proj: _Projection) -> dict[str, Any]:
        store, dec = self.store, self.cspec.decode
        out: dict[str, Any] = {}
        pad = proj.size - len(proj.pages)
        for name in store.page_names:
            init = dec(name, store.init[name])
            for i, pid in enumerate(proj.pages):
                out[f"{name}[{i}]"] = dec(name, store.page(name, pid))
            for i in range(len(proj.pages), proj.size):
                out[f"{name}[{i}]"] = init
        readers: list[int | None] = list(proj.readers) or [None]
        for name in store.reader_names:
            for j, rid in enumerate(readers):
                out[f"{name}[r{j}]"] = dec(name, store.init[name] if rid is None else store.reader(name, rid))
        for name in store.rp_names:
            init = dec(name, store.init[name])
            for j, rid in enumerate(readers):
                for i, pid in enumerate(proj.pages):
                    value = store.init[name] if rid is None else store.rp_value(name, rid, pid)
                    out[f"{name}[r{j},{i}]"] = dec(name, value)
                for i in range(len(proj.pages), len(proj.pages) + pad):
                    out[f"{name}[r{j},{i}]"] = init
        return out


def _within(bound: tuple[Any, Any], value: int, names: dict[str, Any]) -> bool:
    lo, hi = bound
    low = lo if lo is None or isinstance(lo, int) else lo(names, {})
    high = hi if hi is None or isinstance(hi, int) else hi(names, {})
    return (low is None or value >= low) and (high is None or value <= high)


__all__ = ["Name", "Recorder", "Step"]
