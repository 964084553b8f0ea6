"""The firing pipeline: every state change of the runtime goes through ``Pipeline.fire`` or
``Pipeline.fire_batch``, and both run the same stages::

    1. source   the owner object's state has a transition for the event (table, or the
                ``transitions`` machine with backend="machine")
    2. guard    the compiled guard on the pre-state; the first false conjunct names the refusal
    3. effects  every value computed on the pre-state ('*' effects over their runtime domain)
    4. bounds   every value inside its variable's declared min/max
    5. apply    owner := target, then every effect at once; watchers told what changed
    6. record   (record=True) the step's projection before and after, for the conformance checker

A refusal in 1-4 raises a GuardRefused subclass and changes nothing.  A batch (one event on many
pages, or for many readers) is evaluated by the vector backend when ``batch.BatchPlanner`` proves
its firings may be decided together (see batch.py), else one by one inside a transaction; either
way it fires all or nothing (or, with ``atomic=False``, each firing on its own).  This module is
longer than most: the stages, their single, repeated and batched entries, and the transactions they
run in read best in one place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from .batch import VectorFiring
from .batchplan import BatchPlanner
from .chainplan import ChainPlan, Tally, build_chain
from .compiler import OBS, CompiledEvent, CompiledSpec
from .domains import LIVE_PAGES, READER_PAGES
from .errors import ConfigError, DomainError, GuardRefused, IntegrityError
from .fireplan import PlanContext, build_allowed, build_fire
from .machines import MachineBackend, TableBackend
from .names import RuntimeNames
from .proposeplan import Hook, ProposalsPlan, build_proposals
from .recorder import Recorder
from .refusals import Refusals
from .state import StateStore

NO_HOOKS: dict[int, Hook] = {}  # ``proposals`` without conditions or calls (never written)
VECTOR_FROM = 16  # batches at least this long are decided by the vector backend (numpy has a fixed cost)
# Per event, the batch length from which the vector backend is cheaper than one firing at a time,
# measured on the trace replay (an event's vector cost is mostly fixed: its conjuncts' numpy calls);
# an event not named here uses VECTOR_FROM.  Read only through ``vector_from``.
EVENT_VECTOR_FROM: dict[str, int] = {"acquire": 48, "attach": 48, "offload": 48, "spill": 48, "admit": 48,
                                     "forget": 48, "detach": 32, "evict": 24, "offload_done": 24}
_VECTOR_FROM_SHIPPED = VECTOR_FROM
Write = tuple[str, str, Any, Any]  # (target, index kind "p" / "r" / "rp" / "star", star index, value)
Watcher = Callable[[Any], None]


class Pipeline:
    """Source, guard, effects, bounds, apply, record: written once, for single and batched firings."""

    def __init__(self, cspec: CompiledSpec, store: StateStore, *, backend: str = "table", record: bool = False,
                 strict: bool = False, fast: bool = True, describe: Callable[[int | None], str] | None = None,
                 page_bound: int = 1 << 20) -> None:
        self.cspec = cspec
        self.store = store
        self.names = RuntimeNames(cspec, store, page_bound, fast and backend == "table")
        self.machine = MachineBackend(cspec) if backend == "machine" else None
        table = TableBackend(cspec).table  # (owner, event, source) -> target, read off the machines
        self.sources: dict[str, frozenset[int]] = {
            name: frozenset(cspec.codes[ev.owner][src] for (o, e, src) in table if e == name and o == ev.owner)
            for name, ev in cspec.events.items()}
        self.source_table: dict[str, np.ndarray] = {}  # per event: is-a-source by owner state code (batches)
        for name, ev in cspec.events.items():
            is_source = np.zeros(len(cspec.codes[ev.owner]), dtype=bool)
            is_source[list(self.sources[name])] = True
            self.source_table[name] = is_source
        self.recorder = Recorder(cspec, store, self.names, enabled=record)
        self.strict = strict
        self.fast = fast and backend == "table"
        self.describe = describe or (lambda rid: "no reader" if rid is None else f"reader #{rid}")
        self.fired = Tally()  # firings by event (a plain dict's item writes: the plans count every one)
        self._fired_marks: list[int] = []  # where each open transaction's firings start in fired_log
        # events fired inside transactions (undone on rollback): a name a firing, (name, k) for k at once
        self.fired_log: list[str | tuple[str, int]] | None = None
        self._context = PlanContext(self, self._bounds, self._steps)
        self._fire_plans: dict[str, Callable[[Any, Any, Any, Any], None]] = {}  # fireplan.py, built when first fired
        self._allow_plans: dict[str, Callable[[Any, Any], bool]] = {}
        self._propose_plans: dict[str, Callable[[Any, Any], bool]] = {}
        self._chains: dict[tuple[str, str, str], ChainPlan] = {}  # chainplan.py, built when first asked
        self._proposals: dict[tuple[str, ...], tuple[Any, Any, ProposalsPlan]] = {}  # proposeplan.py, when first asked
        self.vector_firings = 0  # firings decided by the vector backend (batches with a plan)
        # events that change nothing (no effects, the owner's state kept): left out of ``version``
        self.pure: frozenset[str] = frozenset(
            name for name, ev in cspec.events.items() if not ev.effects and self.sources[name] == {ev.target})
        self.refused: Counter[str] = Counter()
        self.watchers: dict[str, list[Watcher]] = {}
        self.planner = BatchPlanner(cspec)
        self.refusals = Refusals(cspec, store, self.refused, self.describe)
        # per event: the owner's index kind, and each effect with its index kind and its bounds, folded
        # once (a bound reads constants and ``pages`` only, which the runtime never changes)
        self._plans: dict[str, tuple[str, list[tuple[Any, str, Any, Any]]]] = {}
        for name, ev in cspec.events.items():
            effs = []
            for eff in ev.effects:
                kind = "star" if eff.star is not None else {"p": "p", "r": "r", "r,p": "rp"}[eff.index]
                effs.append((eff, kind, self._fold_bound(eff.lo), self._fold_bound(eff.hi)))
            self._plans[name] = ({"page": "p", "reader": "r"}.get(ev.scope, "rp"), effs)

    # -- watchers ---------------------------------------------------------------------------------
    def watch(self, name: str, fn: Watcher) -> None:
        """Call ``fn(index)`` after every write of ``name`` (index: a page id, a reader id, ``(rid, pid)``,
        or an array of page ids for a batch)."""
        self.watchers.setdefault(name, []).append(fn)
        self._fire_plans.clear()  # the plans call the watchers they saw when built
        self._allow_plans.clear()
        self._propose_plans.clear()
        self._chains.clear()
        self._proposals.clear()

    def notify(self, name: str, index: Any) -> None:
        """Tell the watchers of ``name`` that it changed at ``index``."""
        for fn in self.watchers.get(name, ()):
            fn(index)

    # -- transactions -----------------------------------------------------------------------------
    def begin(self) -> int:
        """Start a transaction (nestable); returns its savepoint."""
        self.recorder.mark()
        if self.fired_log is None:
            self.fired_log = []
        self._fired_marks.append(len(self.fired_log))
        return self.store.begin()

    def commit(self) -> None:
        """Keep what the innermost transaction wrote."""
        self.store.commit()
        self.recorder.unmark(keep=True)
        self._fired_marks.pop()
        if not self._fired_marks:
            self.fired_log = None

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """All or nothing: what the block fires is kept when it returns, undone when it raises."""
        savepoint = self.begin()
        try:
            yield
        except BaseException:
            self.rollback(savepoint)
            raise
        self.commit()

    def tentative(self, names: Sequence[str]) -> _Tentative:
        """``atomic`` for a batch the caller takes back to one firing at a time when a guard refuses it:
        on a GuardRefused (raised on) the refusals the block counted for ``names`` are taken back too
        (one at a time meets the refusal and counts it there)."""
        return _Tentative(self, names)

    def rollback(self, savepoint: int) -> None:
        """Undo what the innermost transaction wrote (its recorded steps are dropped too)."""
        for _kind, name, index in self.store.rollback(savepoint):
            self.notify(name, index)
        self.names.inc.forget_all()
        self.recorder.unmark(keep=False)
        start = self._fired_marks.pop()
        assert self.fired_log is not None
        fired = self.fired
        for entry in self.fired_log[start:]:  # the rolled-back firings did not happen
            if isinstance(entry, str):
                fired[entry] -= 1
            else:
                fired[entry[0]] -= entry[1]
        del self.fired_log[start:]
        if not self._fired_marks:
            self.fired_log = None

    # -- single firings ---------------------------------------------------------------------------
    def fire(self, name: str, r: int | None = None, p: int | None = None, *, params: Mapping[str, int] | None = None,
             observed: Mapping[str, Any] | None = None) -> None:
        """Fire spec event ``name`` for reader ``r`` on page ``p`` (as the event takes them); raises a
        GuardRefused subclass and changes nothing when the spec refuses.  The fast path runs the event's
        generated plan (fireplan.py: these stages unrolled), the general path ``fire_general``."""
        plan = self._fire_plans.get(name)
        if plan is None:
            plan = self._fire_plans[name] = self._fire_plan(name)
        plan(r, p, params, observed)

    def firer(self, name: str) -> Callable[[Any, Any, Any, Any], None]:
        """``fire`` for event ``name`` as one callable of ``(r, p, params, observed)`` (for a caller firing
        it several times in a row; fetch it again after ``watch``)."""
        plan = self._fire_plans.get(name)
        if plan is None:
            plan = self._fire_plans[name] = self._fire_plan(name)
        return plan

    def _fire_plan(self, name: str) -> Callable[[Any, Any, Any, Any], None]:
        ev = self.cspec.events.get(name)
        if ev is None:
            raise ConfigError(f"the spec has no event '{name}'")
        built = build_fire(self, self._context, ev) if self.fast else None
        if built is not None:
            return built
        return lambda r, p, params, observed: self.fire_general(ev, r, p, params, observed)

    def fire_general(self, ev: CompiledEvent, r: int | None, p: int | None, params: Mapping[str, int] | None,
                     observed: Mapping[str, Any] | None) -> None:
        """The stages of one firing, written once for every event (the general path)."""
        name = ev.name
        n = self.names.bind(ev, r, p, params, observed)
        target = self._source(ev, r, p, n)
        writes = self._evaluate(ev, r, p, n)
        rec = self.recorder.enabled
        if rec:
            before = self.recorder.before(ev, r, p, n)
        self.apply_firing(ev, r, p, target, writes)
        self.count(name, 1)
        if rec:
            self.recorder.after(ev, r, p, params, before)

    def count(self, name: str, k: int) -> None:
        """``k`` firings of ``name`` happened (undone with the transaction they happened in)."""
        self.fired[name] += k
        if self.fired_log is not None:
            self.fired_log.append(name if k == 1 else (name, k))

    def allowed(self, name: str, r: int | None = None, p: int | None = None) -> bool:
        """Whether ``fire(name, r, p)`` would pass its source state and guard (bounds aside); changes
        nothing.  Policies ask this before proposing a step."""
        plan = self._allow_plans.get(name)
        return (plan or self.allower(name))(r, p)

    def allower(self, name: str) -> Callable[[Any, Any], bool]:
        """``allowed`` for event ``name`` as one callable of ``(r, p)`` (for a caller asking it many times)."""
        plan = self._allow_plans.get(name)
        if plan is None:
            ev = self.cspec.events[name]
            plan = self._allow_plans[name] = (build_allowed(self, self._context, ev) if self.fast else None) or \
                (lambda r, p: self.allowed_general(ev, r, p))
        return plan

    def propose(self, name: str, r: int | None = None, p: int | None = None) -> bool:
        """``fire(name, r, p)`` if ``allowed(name, r, p)``, in one pass (the event's generated plan on the
        fast path): True if it fired; False, nothing changed and no refusal counted, if its source state
        or guard refuses.  The runtime's own proposals (compress, admit, slide) go this way."""
        return self.proposer(name)(r, p)

    def proposer(self, name: str) -> Callable[[Any, Any], bool]:
        """``propose`` for event ``name`` as one callable of ``(r, p)`` (for a caller proposing it many
        times)."""
        plan = self._propose_plans.get(name)
        if plan is None:
            ev = self.cspec.events.get(name)
            if ev is None:
                raise ConfigError(f"the spec has no event '{name}'")
            built: Any = build_fire(self, self._context, ev, propose=True) if self.fast else None
            plan = self._propose_plans[name] = built or (lambda r, p: self.allowed(name, r, p)
                                                         and self._fired(name, r, p))
        return plan

    def proposals(self, names: tuple[str, ...], when: dict[int, Hook] | None = None,
                  then: dict[int, Hook] | None = None) -> ProposalsPlan:
        """``proposals(r, p)``: ``propose`` each of ``names`` in turn for reader ``r`` on page ``p`` (event
        i only where ``when[i](p)``; ``then[i](p)`` called after it fired; one out of its bounds refused
        and counted, the next proposed), each seeing the ones before; returns the mask of those that
        fired (bit i: event i).  The generated proposals of their plans (proposeplan.py) on the fast path;
        kept for the next call with the same names and the same ``when`` and ``then`` objects."""
        when, then = NO_HOOKS if when is None else when, NO_HOOKS if then is None else then
        kept = self._proposals.get(names)
        if kept is not None and kept[0] is when and kept[1] is then:
            return kept[2]
        evs = tuple(self.cspec.events[name] for name in names)
        found = build_proposals(self, self._context, evs, when, then)
        if found is None:
            proposers = [self.proposer(name) for name in names]

            def found(r: Any, p: int) -> int:
                got = 0
                for i, propose in enumerate(proposers):
                    if i in when and not when[i](p):
                        continue
                    try:
                        if propose(r, p):
                            got |= 1 << i
                            if i in then:
                                then[i](p)
                    except GuardRefused:  # an effect out of its bounds: refused and counted, as alone
                        pass
                return got
        self._proposals[names] = (when, then, found)
        return found

    def _fired(self, name: str, r: int | None, p: int | None) -> bool:
        self.fire(name, r, p)
        return True

    def allowed_general(self, ev: CompiledEvent, r: int | None, p: int | None) -> bool:
        """``allowed`` written once for every event (the general path)."""
        if self.owner_state(ev, r, p) not in self.sources[ev.name]:
            return False
        guard = ev.guard if self.fast else ev.gguard
        return bool(guard(self.names.bind(ev, r, p, None, None), self.store.arrays))

    def owner_state(self, ev: CompiledEvent, r: int | None, p: int | None) -> int:
        """The state code of ``ev``'s owner object for reader ``r`` on page ``p`` (reads only)."""
        store = self.store
        if ev.scope == "page":
            return store.cols[ev.owner][p]  # type: ignore[no-any-return]
        if ev.scope == "reader":
            return store.rcols[ev.owner][r]  # type: ignore[no-any-return]
        return store.rp_value(ev.owner, r, p)  # type: ignore[arg-type]

    def _source(self, ev: CompiledEvent, r: int | None, p: int | None, n: Mapping[str, Any]) -> int:
        state = self.owner_state(ev, r, p)
        if self.machine is None:
            if state not in self.sources[ev.name]:
                raise self.refusals.source(ev, r, p, state)
            return ev.target
        arrays = self.store.arrays
        names = self.cspec.state_names[ev.owner]
        got = self.machine.decide(ev.owner, ev.name, names[state], lambda: bool(ev.gguard(n, arrays)))
        if got is None:
            if state not in ev.sources:
                raise self.refusals.source(ev, r, p, state)
            raise self.refusals.guard(ev, r, p, n)
        return self.cspec.codes[ev.owner][got]

    def _evaluate(self, ev: CompiledEvent, r: int | None, p: int | None, n: dict[str, Any]) -> list[Write]:
        a = self.store.arrays
        fast = self.fast
        if not (ev.guard if fast else ev.gguard)(n, a):
            raise self.refusals.guard(ev, r, p, n)
        if self.strict:
            self._steps(ev, r, p, n)
        writes: list[Write] = []
        for eff, kind, lo, hi in self._plans[ev.name][1]:
            if kind == "star":
                var = "q" if eff.star.kind in (READER_PAGES, LIVE_PAGES) else "s"
                for i in list(self.names.domain(eff.star, n)):
                    n[var] = i
                    value = (eff.fn if fast else eff.gfn)(n, a)
                    self._bounds(ev, eff, value, r, p, n)
                    writes.append((eff.target, "star", _index(eff.index, r, p, i), value))
                continue
            value = (eff.fn if fast else eff.gfn)(n, a)
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                self._bounds(ev, eff, value, r, p, n)
            writes.append((eff.target, kind, None, value))
        return writes

    def _steps(self, ev: CompiledEvent, r: int | None, p: int | None, n: Mapping[str, Any]) -> None:
        a = self.store.arrays
        for prop in ev.steps:
            if not prop.fn(n, a):
                raise IntegrityError([f"step property '{prop.prop.name}' fails before {ev.name} "
                                      f"(r={r}, p={p}): {prop.text}"])

    def write_plan_of(self, name: str) -> tuple[str, list[tuple[Any, str, Any, Any]]]:
        """The owner's index kind of ``name`` and each effect with its index kind and folded bounds."""
        return self._plans[name]

    def write_plan(self, name: str) -> list[tuple[Any, str, Any, Any]]:
        """Each effect of ``name`` with its index kind and its folded bounds."""
        return self._plans[name][1]

    def _fold_bound(self, bound: Any) -> Any:
        return bound if bound is None or isinstance(bound, int) else bound(self.names.n, self.store.arrays)

    def _bounds(self, ev: CompiledEvent, eff: Any, value: Any, r: int | None, p: int | None,
                n: Mapping[str, Any]) -> None:
        lo, hi = self._fold_bound(eff.lo), self._fold_bound(eff.hi)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.refused[ev.name] += 1
            raise DomainError(ev.name, p, self.refusals.block(p), self.describe(r), ev.guard_text,
                              f"{lo} <= {eff.target} <= {hi}", f"the effect gives {eff.target} = {value}")

    def apply_firing(self, ev: CompiledEvent, r: int | None, p: int | None, target: int, writes: list[Write]) -> None:
        """Stage 5 of one firing already decided: owner := ``target``, then every write, watchers told,
        tracked quantifiers brought up to date."""
        store, watchers = self.store, self.watchers
        owner = self._plans[ev.name][0]
        for name, kind, index, value in [(ev.owner, owner, None, target), *writes]:
            if kind == "p":
                store.set_page(name, p, value)  # type: ignore[arg-type]
                index = p
            elif kind == "r":
                store.set_reader(name, r, value)  # type: ignore[arg-type]
                index = r
            elif kind == "rp":
                store.set_rp(name, r, p, value)  # type: ignore[arg-type]
                index = (r, p)
            else:
                self._write(name, self.cspec.scopes[name], index, value)
                continue
            found = watchers.get(name)
            if found:
                for fn in found:
                    fn(index)
        self.names.inc.after(ev, r, p)

    def write_many(self, name: str, scope: str, rids: Any, pids: np.ndarray | None, values: np.ndarray | int,
                   pid_list: list[int] | None = None) -> None:
        """Apply one name's values of a batch: at ``pids`` (distinct; ``pid_list`` the same as a list), for
        reader ``rids`` (one id or one per page); ``values`` one per page or one for all."""
        store = self.store
        if scope == "page":
            assert pids is not None
            store.set_pages(name, pids, values)
            index: Any = pids
        elif scope == "reader":
            if isinstance(rids, np.ndarray):
                store.set_readers(name, rids, values)
            else:
                store.set_reader(name, int(rids), values if isinstance(values, int) else int(values[-1]))
            index = rids
        else:
            assert pids is not None
            if isinstance(rids, np.ndarray):
                pid_list = pids.tolist() if pid_list is None else pid_list
                vals = [values] * len(pid_list) if isinstance(values, int) else values.tolist()
                for rid, pid, value in zip(rids.tolist(), pid_list, vals, strict=True):
                    store.set_rp(name, rid, pid, value)
            else:
                store.set_rp_row(name, int(rids), pids, values)
            index = (rids, pids)
        watchers = self.watchers.get(name)
        if watchers:
            for fn in watchers:
                fn(index)

    def _write(self, name: str, scope: str, index: Any, value: Any) -> None:
        store = self.store
        if scope == "page":
            store.set_page(name, index, value)
        elif scope == "reader":
            store.set_reader(name, index, value)
        else:
            store.set_rp(name, index[0], index[1], value)
        watchers = self.watchers.get(name)
        if watchers:
            for fn in watchers:
                fn(index)

    # -- re-checks of events that change nothing ---------------------------------------------------
    def version(self) -> int:
        """How many firings of events that change state have happened (a rollback takes its firings
        back together with what they wrote).  Every write of spec state is such a firing, so while the
        version stays the same the state does too, and a guard, which reads spec state alone, decides
        the same."""
        fired = self.fired
        return sum(fired.values()) - sum(fired[name] for name in self.pure)

    def recheck(self, name: str, r: int | None, p: np.ndarray, passed: int | None) -> int | None:
        """``fire_batch(name, r, p, distinct=True)`` for an event that changes nothing (``pure``), unless
        this same batch passed at version ``passed`` and the version is still that: then its firings
        are counted as the batch would count them and nothing else is done (the guard would decide
        the same on the same state).  Returns the version to pass next time, or None where every
        firing is evaluated (the general path, strict checking, recorded steps)::

            lease taken   read: fired, passed = 41   read: counted (41)   append fires   read: fired, 42
        """
        if name not in self.pure:
            raise ConfigError(f"event '{name}' changes state: it cannot be re-checked by version")
        if not self.fast or self.strict or self.recorder.enabled:
            self.fire_batch(name, r, p, distinct=True)
            return None
        now = self.version()
        if passed == now:
            self.count(name, len(p))
        else:
            self.fire_batch(name, r, p, distinct=True)
        return now

    # -- batches ----------------------------------------------------------------------------------
    def fire_batch(self, name: str, r: int | np.ndarray | None, p: np.ndarray | None, *,
                   atomic: bool = True, distinct: bool = False) -> np.ndarray:
        """Fire ``name`` for every (reader, page) of the batch, in order: ``r`` one reader (int) or one
        per firing, ``p`` one page per firing (distinct).  ``atomic``: all fire or none (the first
        refusal is raised); else each firing is a proposal decided on its own (as ``propose``: a refusal
        is not counted) and the mask of those that fired is returned (the firings must then be
        independent: distinct readers and pages).  ``distinct``: the
        caller knows the pages are distinct (a lease's), and so are the readers when there is one per
        firing (a decode step's), so the batch need not check."""
        ev = self.cspec.events.get(name)
        if ev is None:
            raise ConfigError(f"the spec has no event '{name}'")
        count = len(p) if p is not None else len(r)  # type: ignore[arg-type]
        if count == 0:
            return np.zeros(0, dtype=bool)
        if count == 1 and atomic:  # one firing is all or nothing on its own: no batch, no transaction
            self.firer(name)(_first(r), _first(p), None, None)
            return _all_fired(1)
        plan = self.planner.plan(ev, r, p) if self.fast and count >= vector_from(name) and not self.strict else None
        if plan is not None:
            assert p is not None
            return VectorFiring(self, ev, plan, r, p, count, distinct).run(atomic)
        return self.fire_each(ev, r, p, count, atomic)

    def fire_within(self, name: str, r: int | None, p: np.ndarray | None, listed: list[int] | None = None) -> None:
        """``fire_batch(name, r, p, distinct=True)`` inside a transaction of the caller's that a refusal
        undoes whole: below the event's vector crossover each page's firing in order, without the batch's
        nested transaction and conversions (``listed``: the same pages as a list, when the caller has one;
        ``p`` None: made from it when the batch goes to the vector backend)."""
        count = len(listed) if listed is not None else len(p)  # type: ignore[arg-type]
        if count >= vector_from(name):
            self.fire_batch(name, r, np.array(listed, dtype=np.int64) if p is None else p, distinct=True)
            return
        fire = self.firer(name)
        for pid in (listed if listed is not None else p.tolist()):  # type: ignore[union-attr]
            fire(r, pid, None, None)

    def fire_repeat(self, name: str, r: int, p: int, k: int) -> None:
        """Fire ``name`` ``k`` times for reader ``r`` on page ``p`` (each firing sees the ones before),
        all or none: the appends that fill a page."""
        ev = self.cspec.events[name]
        plan = self.planner.plan(ev, r, p, repeat=True) if self.fast and k > 1 and not self.strict else None
        pages = np.full(k, p, dtype=np.int64)
        if plan is not None:
            VectorFiring(self, ev, plan, r, pages, k).run(True)
            return
        self.fire_each(ev, r, pages, k, True)

    def chain(self, head: str, repeated: str, tail: str) -> ChainPlan:
        """``chain(r, p, first, k, last)``: fire ``head`` for reader ``r`` on page ``p`` if ``first``, then
        ``repeated`` ``k`` times, then ``tail`` if ``last``, each firing seeing the ones before (the
        page a long write fills: open, its appends, seal).  The generated chain of their plans
        (chainplan.py) on the fast path; otherwise ``fire``, ``fire_repeat`` and ``fire`` in turn."""
        key = (head, repeated, tail)
        found = self._chains.get(key)
        if found is None:
            evs = self.cspec.events
            rep = evs[repeated]
            plan = self.planner.plan(rep, 0, 0, repeat=True) if self.fast and not self.strict else None
            found = build_chain(self, self._context, evs[head], rep, plan, evs[tail], self._repeat_each)
            if found is None:
                fire, fire_repeat = self.fire, self.fire_repeat

                def found(r: int, p: int, first: bool, k: int, last: bool) -> None:
                    if first:
                        fire(head, r, p)
                    if k > 2:
                        fire_repeat(repeated, r, p, k)
                    else:
                        for _ in range(k):
                            fire(repeated, r, p)
                    if last:
                        fire(tail, r, p)
            self._chains[key] = found
        return found

    def _repeat_each(self, ev: CompiledEvent, r: int, p: int, k: int) -> None:
        self.fire_each(ev, r, np.full(k, p, dtype=np.int64), k, True)

    def fire_each(self, ev: CompiledEvent, r: Any, p: Any, count: int, atomic: bool) -> np.ndarray:
        """A batch fired one single firing at a time (all or none inside a transaction when ``atomic``);
        the mask of the firings that fired."""
        rs: list[Any]
        if r is None:
            rs = [None] * count
        elif isinstance(r, (int, np.integer)):
            rs = [int(r)] * count
        else:
            rs = r.tolist() if isinstance(r, np.ndarray) else [int(x) for x in r]
        ps: list[Any] = [None] * count if p is None else p.tolist() if isinstance(p, np.ndarray) else \
            [int(x) for x in p]
        if not atomic:  # each a proposal, as the vector backend decides them: a refusal is not counted
            fired = np.zeros(count, dtype=bool)
            propose = self.proposer(ev.name)
            for i in range(count):
                try:
                    fired[i] = propose(rs[i], ps[i])
                except GuardRefused:  # an effect out of its bounds: refused (and counted) as alone
                    pass
            return fired
        fire = self.firer(ev.name)
        sp = self.begin()
        try:
            for rid, pid in zip(rs, ps, strict=True):
                fire(rid, pid, None, None)
        except BaseException:
            self.rollback(sp)
            raise
        self.commit()
        return _all_fired(count)

def vector_from(name: str) -> int:
    """The least batch of event ``name`` that ``fire_batch`` hands to the vector backend: the event's
    measured crossover, or ``VECTOR_FROM`` when that is lower (a lowered ``VECTOR_FROM`` sends every
    batch at least that long to the vector backend, whatever its event)."""
    least = EVENT_VECTOR_FROM.get(name, VECTOR_FROM)
    return VECTOR_FROM if VECTOR_FROM < _VECTOR_FROM_SHIPPED else max(VECTOR_FROM, least)


def _first(ids: Any) -> int | None:
    """The one reader or page of a batch of one firing: ``ids`` None, one id, or a sequence of one."""
    if ids is None:
        return None
    return int(ids) if isinstance(ids, (int, np.integer)) else int(ids[0])


def _all_fired(count: int) -> np.ndarray:
    """A mask of ``count`` firings that all fired (``np.ones`` without its Python wrapper)."""
    out = np.empty(count, dtype=bool)
    out.fill(True)
    return out


def _index(index: str, r: int | None, p: int | None, star: int | None) -> Any:
    """The index an effect written ``x[index]`` assigns for reader ``r``, page ``p`` and '*' = ``star``."""
    parts = index.split(",")
    vals = [(r if part == "r" else p if part == "p" else star) for part in parts]
    return vals[0] if len(vals) == 1 else (vals[0], vals[1])


__all__ = ["OBS", "Pipeline"]


class _Tentative:
    """``Pipeline.tentative``'s context (a class: it runs once or twice per write)."""

    __slots__ = ("pipe", "names", "before", "savepoint")

    def __init__(self, pipe: Pipeline, names: Sequence[str]) -> None:
        self.pipe, self.names = pipe, names
        refused = pipe.refused
        self.before = [refused.get(name) for name in names]

    def __enter__(self) -> None:
        self.savepoint = self.pipe.begin()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        pipe = self.pipe
        if kind is None:
            pipe.commit()
            return
        pipe.rollback(self.savepoint)
        if issubclass(kind, GuardRefused):
            refused = pipe.refused
            for name, count in zip(self.names, self.before, strict=True):
                if count is None:
                    refused.pop(name, None)
                else:
                    refused[name] = count
