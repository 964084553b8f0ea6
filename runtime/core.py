"""The guarded state machine: every state change of the runtime goes through ``Core.fire``.

Firing ``event`` on page ``pid``::

    1. source    the owner object's state must have a transition for the event
                 (table or ``transitions`` machine, see machines.py)
    2. guard     the compiled guard, in every view the event's mode asks for (compiler.py):
                 local/global -> once, on the page; view -> each live sequence holding the page,
                 or the page's detached view when none does
    3. effects   evaluated on the pre-state in each view; per-page results must agree across views;
                 every result must lie within its variable's declared bounds
    4. apply     owner := target, then every effect at once; derived caches invalidated
    5. record    (when recording) the whole view before and after, once per view

Any failure in 1-3 raises a GuardRefused subclass and changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from morphcache.spec.model import PAGE

from . import binding as B
from .compiler import GLOBAL, LOCAL, PID, CompiledEvent, CompiledSpec
from .errors import (
    ConfigError,
    DomainError,
    GuardRefused,
    IntegrityError,
    PinnedPageError,
    TopologyError,
    ViewConflictError,
)
from .fastpath import FastPaths
from .machines import MachineBackend, TableBackend
from .pagetable import PageTable
from .recorder import Recorder, Step
from .views import View, sequence_view


class Sequence:
    """A live sequence: its id, its view (block table + system state) and its runtime bookkeeping."""

    __slots__ = ("sid", "view", "slide_next")

    def __init__(self, sid: str, view: View) -> None:
        self.sid = sid
        self.view = view
        self.slide_next = 0  # first block index not yet proposed for ``slide``

    @property
    def block(self) -> list[int]:
        """Page ids of blocks 0..n-1."""
        return self.view.block

    @property
    def frontier(self) -> int:
        """Tokens written so far."""
        return int(self.view.names[B.FRONTIER])


class Core:
    """Spec state of all pages and sequences, and the one function that changes it."""

    def __init__(self, cspec: CompiledSpec, backend: str = "table", record: bool = False,
                 strict: bool = False) -> None:
        self.cspec = cspec
        self.events = cspec.events
        self.pages = PageTable(cspec)
        self.cols = self.pages.cols
        self.seqs: dict[str, Sequence] = {}
        self.page_size = int(cspec.constants[B.C])
        self.machine = MachineBackend(cspec) if backend == "machine" else None
        self.table = TableBackend(cspec).table
        self.recorder = Recorder(enabled=record)
        self.strict = strict
        self.fired: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        gnames: dict[str, Any] = {**cspec.constants, **cspec.system_init, "pages": 0}
        self.gview = View("global view", gnames, self.cols, [], is_global=True)
        self.agg_contrib: dict[str, list[int]] = {name: [] for name in cspec.aggregates}
        self.agg_total: dict[str, int] = {name: 0 for name in cspec.aggregates}
        self.graph_idle = cspec.spec.objects[B.GRAPH].initial
        self.fast = FastPaths(self, backend)

    # -- views ------------------------------------------------------------------------------------
    def new_sequence(self, sid: str) -> Sequence:
        """A sequence with an empty block table and the spec's initial system state."""
        seq = Sequence(sid, sequence_view(f"view of sequence '{sid}'", self.cspec, self.cols, []))
        self.seqs[sid] = seq
        return seq

    def global_view(self) -> View:
        """The view over every page id, with the page aggregates up to date."""
        g = self.gview
        self.refresh_aggregates()
        g.names["pages"] = self.pages.size
        return g

    def detached_view(self, pid: int) -> View:
        """The chain of ``pid``'s ancestors ending with ``pid``, frontier at the end of the page."""
        chain = []
        cur = pid
        while cur >= 0:
            chain.append(cur)
            cur = self.pages.info[cur].parent
        chain.reverse()
        system = {B.FRONTIER: len(chain) * self.page_size}
        return sequence_view(f"detached view of page {pid}", self.cspec, self.cols, chain, system)

    def page_views(self, pid: int, first: Sequence | None = None) -> list[View]:
        """Views of every live sequence holding ``pid`` (``first`` first), or its detached view."""
        seqs = self.pages.info[pid].seqs
        if not seqs:
            return [self.detached_view(pid)]
        if first is not None and len(seqs) > 1 and first.sid in seqs:
            return [first.view] + [s.view for s in seqs.values() if s is not first]  # type: ignore[attr-defined]
        return [s.view for s in seqs.values()]  # type: ignore[attr-defined]

    # -- aggregates -------------------------------------------------------------------------------
    def refresh_aggregates(self) -> None:
        """Bring every page aggregate up to date with the pages changed since the last refresh."""
        dirty = self.pages.dirty_agg
        if not dirty or not self.agg_total:
            dirty.clear()
            return
        cols = self.cols
        for name, agg in self.cspec.aggregates.items():
            contrib = self.agg_contrib[name]
            total = self.agg_total[name]
            while len(contrib) < self.pages.size:
                contrib.append(0)
            names: dict[str, Any] = {}
            for pid in dirty:
                names[agg.var] = pid
                v = agg.body(names, cols)
                c = int(v) if agg.kind == "sum" else int(not v) if agg.kind == "all" else int(bool(v))
                total += c - contrib[pid]
                contrib[pid] = c
            self.agg_total[name] = total
            kind = agg.kind
            self.gview.names[name] = total if kind == "sum" else (total == 0 if kind == "all" else total > 0)
        dirty.clear()

    # -- firing -----------------------------------------------------------------------------------
    def fire(self, name: str, pid: int | None = None, seq: Sequence | None = None,
             params: Mapping[str, int] | None = None) -> None:
        """Fire spec event ``name`` on page ``pid`` (or on ``seq``'s system objects); see the module doc.

        ``seq`` is the sequence the operation acts for: its view is evaluated first (and, for a
        system event, is the only view).  Raises a GuardRefused subclass and changes nothing when the
        spec refuses.
        """
        ev = self.events.get(name)
        if ev is None:
            raise ConfigError(f"the spec has no event '{name}'")
        if ev.scope != PAGE:
            if seq is None:
                raise ConfigError(f"system event '{name}' needs a sequence")
            self._fire_system(ev, seq, params)
            return
        assert pid is not None
        state = self.cols[ev.owner][pid]
        rec = self.recorder.enabled
        if self.machine is None:
            if (ev.owner, name, state) not in self.table:
                raise self._source_refusal(ev, pid, state, self._first_view(ev, pid, seq))
            if not params and not rec and self.fast.fire(ev, pid, state):
                return
            views = self._views(ev, pid, seq)
            page_w, sys_w = self._evaluate(ev, pid, views, params)
            target = ev.target
        else:
            views = self._views(ev, pid, seq)
            box: list[Any] = []

            def check() -> bool:
                try:
                    box.append(self._evaluate(ev, pid, views, params))
                    return True
                except GuardRefused as exc:
                    box.append(exc)
                    return False

            got = self.machine.decide(ev.owner, name, str(state), check)
            if got is None:
                if box and isinstance(box[0], GuardRefused):
                    raise box[0]
                raise self._source_refusal(ev, pid, state, views[0])
            target = got
            page_w, sys_w = box[0]
        if rec:
            rviews = views if ev.mode != LOCAL else self.page_views(pid, seq)
            befores = [(v, v.snapshot(self.cspec), self._args(ev, pid, v, params)) for v in rviews]
        write = self.pages.write
        write(pid, ev.owner, target)
        for wpid, wname, value in page_w:
            write(wpid, wname, value)
        for view, wname, value in sys_w:
            view.names[wname] = value
        self.fired[name] += 1
        if rec:
            for v, before, args in befores:
                self.recorder.add(Step(name, v.label, args, before, v.snapshot(self.cspec)))

    def _first_view(self, ev: CompiledEvent, pid: int, seq: Sequence | None) -> View:
        if ev.mode == LOCAL or ev.mode == GLOBAL:
            g = self.gview
            g.names["p"] = pid
            return g
        return self.page_views(pid, seq)[0]

    def _views(self, ev: CompiledEvent, pid: int, seq: Sequence | None) -> list[View]:
        if ev.mode == LOCAL:
            self.gview.names["pages"] = self.pages.size
            return [self.gview]
        if ev.mode == GLOBAL:
            return [self.global_view()]
        seqs = self.pages.info[pid].seqs
        if len(seqs) == 1:
            return [next(iter(seqs.values())).view]  # type: ignore[attr-defined]
        return self.page_views(pid, seq)

    def allowed(self, name: str, pid: int | None = None, seq: Sequence | None = None) -> bool:
        """Whether ``fire(name, pid, seq)`` would pass its source state and guard (bounds aside).

        Policies ask this before proposing a step; nothing changes.
        """
        ev = self.events[name]
        if ev.scope != PAGE:
            assert seq is not None
            n = seq.view.names
            return (ev.owner, name, n[ev.owner]) in self.table and bool(ev.guard(n, seq.view.arrays))
        assert pid is not None
        if (ev.owner, name, self.cols[ev.owner][pid]) not in self.table:
            return False
        depth = self.pages.info[pid].depth
        for view in self._views(ev, pid, seq):
            n, a = view.names, (self.cols if ev.direct else view.arrays)
            n["p"] = pid if view.is_global else depth
            n[PID] = pid
            for c in ev.conjuncts:
                if not c.fn(n, a):
                    return False
        return True

    def _args(self, ev: CompiledEvent, pid: int | None, view: View, params: Mapping[str, int] | None
              ) -> dict[str, int]:
        args: dict[str, int] = {}
        if pid is not None:
            args["p"] = pid if view.is_global else self.pages.info[pid].depth
        args.update(params or {})
        return args

    def _evaluate(self, ev: CompiledEvent, pid: int, views: list[View],
                  params: Mapping[str, int] | None) -> tuple[list[tuple[int, str, Any]],
                                                              list[tuple[View, str, Any]]]:
        page_w: list[tuple[int, str, Any]] = []
        sys_w: list[tuple[View, str, Any]] = []
        depth = self.pages.info[pid].depth
        for i, view in enumerate(views):
            n, a = view.names, (self.cols if ev.direct else view.arrays)
            n["p"] = pid if view.is_global else depth
            n[PID] = pid
            if params:
                self._bind_params(ev, n, params)
            for c in ev.conjuncts:
                if not c.fn(n, a):
                    self.refused[ev.name] += 1
                    raise self._refusal(ev, pid, view)
            if self.strict:
                self._check_steps(ev, pid, view)
            view_w: list[tuple[int, str, Any]] = []
            for eff in ev.effects:
                if eff.index == "*":
                    for q in range(n["pages"]):
                        n["q"] = q
                        value = eff.fn(n, a)
                        self._bounds(ev, eff.target, eff.lo, eff.hi, value, pid, view)
                        view_w.append((view.page_at(q), eff.target, value))
                    continue
                value = eff.fn(n, a)
                if eff.lo is not None or eff.hi is not None:
                    self._bounds(ev, eff.target, eff.lo, eff.hi, value, pid, view)
                if eff.system:
                    sys_w.append((view, eff.target, value))
                else:
                    view_w.append((pid, eff.target, value))
            if i == 0:
                page_w = view_w
            elif view_w != page_w:
                self.refused[ev.name] += 1
                raise ViewConflictError(ev.name, pid, depth, view.label, ev.guard_text, ev.guard_text,
                                        f"effects {view_w} disagree with {page_w} of {views[0].label}")
        return page_w, sys_w

    def _bind_params(self, ev: CompiledEvent, n: dict[str, Any], params: Mapping[str, int]) -> None:
        for prm in ev.params:
            value = params.get(prm.name)
            if isinstance(value, bool) or not isinstance(value, int) or not prm.min <= value <= prm.max:
                raise DomainError(ev.name, None, None, "arguments", ev.guard_text,
                                  f"{prm.min} <= {prm.name} <= {prm.max}", f"{prm.name}={value!r}")
            n[prm.name] = value

    def _bounds(self, ev: CompiledEvent, target: str, lo: Any, hi: Any, value: Any, pid: int | None,
                view: View) -> None:
        if lo is None and hi is None:
            return
        n, a = view.names, view.arrays
        low = lo if lo is None or isinstance(lo, int) else lo(n, a)
        high = hi if hi is None or isinstance(hi, int) else hi(n, a)
        if (low is not None and value < low) or (high is not None and value > high):
            self.refused[ev.name] += 1
            block = None if pid is None else n.get("p")
            raise DomainError(ev.name, pid, block, view.label, ev.guard_text,
                              f"{low} <= {target} <= {high}", f"the effect gives {target} = {value}")

    def _check_steps(self, ev: CompiledEvent, pid: int | None, view: View) -> None:
        for prop in ev.steps:
            if not prop.fn(view.names, view.arrays):
                raise IntegrityError([f"step property '{prop.prop.name}' fails before {ev.name} on page "
                                      f"{pid} in {view.label}: {prop.text}"])

    def _fire_system(self, ev: CompiledEvent, seq: Sequence, params: Mapping[str, int] | None) -> None:
        view = seq.view
        n, a = view.names, view.arrays
        state = n[ev.owner]
        known = (ev.owner, ev.name, state) in self.table
        if params:
            self._bind_params(ev, n, params)

        def check() -> bool:
            return bool(ev.guard(n, a))

        if self.machine is None:
            if not known:
                raise self._source_refusal(ev, None, state, view)
            if not check():
                self.refused[ev.name] += 1
                raise self._refusal(ev, None, view)
            target = ev.target
        else:
            got = self.machine.decide(ev.owner, ev.name, str(state), check)
            if got is None:
                if not known:
                    raise self._source_refusal(ev, None, state, view)
                self.refused[ev.name] += 1
                raise self._refusal(ev, None, view)
            target = got
        writes: list[tuple[int | None, str, Any]] = []
        for eff in ev.effects:
            if eff.index == "*":
                for q in range(n["pages"]):
                    n["q"] = q
                    value = eff.fn(n, a)
                    self._bounds(ev, eff.target, eff.lo, eff.hi, value, None, view)
                    writes.append((view.page_at(q), eff.target, value))
            else:
                value = eff.fn(n, a)
                self._bounds(ev, eff.target, eff.lo, eff.hi, value, None, view)
                writes.append((None, eff.target, value))
        rec = self.recorder.enabled
        if rec:
            before = view.snapshot(self.cspec)
        n[ev.owner] = target
        for wpid, wname, value in writes:
            if wpid is None:
                n[wname] = value
            else:
                self.pages.write(wpid, wname, value)
        self.fired[ev.name] += 1
        if rec:
            self.recorder.add(Step(ev.name, view.label, dict(params or {}), before,
                                   view.snapshot(self.cspec)))

    # -- refusals ---------------------------------------------------------------------------------
    def _source_refusal(self, ev: CompiledEvent, pid: int | None, state: Any, view: View) -> GuardRefused:
        self.refused[ev.name] += 1
        block = None if pid is None else self.pages.info[pid].depth
        where = f"{ev.owner}[p]" if pid is not None else ev.owner
        need = " or ".join(f"'{s}'" for s in sorted(ev.sources))
        return GuardRefused(ev.name, pid, block, view.label, f"{where} in {{{need}}}",
                            f"{where} in {{{need}}}", f"{where} is '{state}'")

    def _refusal(self, ev: CompiledEvent, pid: int | None, view: View) -> GuardRefused:
        n, a = view.names, (self.cols if ev.direct else view.arrays)
        failed = next((c for c in ev.conjuncts if not c.fn(n, a)), None)
        text = failed.text if failed is not None else ev.guard_text
        reads = failed.reads if failed is not None else frozenset()
        block = None if pid is None else (pid if view.is_global else self.pages.info[pid].depth)
        shown = []
        for name in sorted(reads):
            if name in self.cspec.page_names and pid is not None:
                shown.append(f"{name}[p]={self.cols[name][pid]!r}")
            elif name in n and not name.startswith("@"):
                shown.append(f"{name}={n[name]!r}")
        detail = ", ".join(shown)
        cls: type[GuardRefused] = GuardRefused
        if B.PIN in reads and pid is not None and self.cols[B.PIN][pid] > 0:  # type: ignore[operator]
            cls = PinnedPageError
        elif B.GRAPH in reads and n.get(B.GRAPH) != self.graph_idle:
            cls = TopologyError
        return cls(ev.name, pid, block, view.label, ev.guard_text, text, detail)
