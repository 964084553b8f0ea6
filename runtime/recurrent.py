"""The recurrent state of linear-attention layers as runtime objects (``spec/gdn_hybrid.yaml``).

A spec that declares the objects ``ckpt`` (per page: none / saved / offloaded / prefetching, with the
generation ``sgen`` it was saved at), ``rstate`` (per reader: none / exact / approx) and ``approx``
(per reader: exact_only / allowed) gets a ``RecurrentStates`` part; a spec without them (the shipped
``hybrid.yaml``) gets ``NoRecurrentState``, which plans nothing and refuses the calls.  Every state
change is a spec event through the pipeline, with the spec's guard::

    call                       spec events                          data plane
    register(approximate=True, opt_in(r, n = replay_budget) before  -
             replay_budget=n)  register(r): budget[r] := n <= R
    save_state(seq, payload)   save(r, p), p the page ending at     checkpoint payload stored for p
                               the frontier
    rebuild_state(seq)         restore(r, p)  | recompute_state(r)  the payload to load (restore, or the
                               | replay_tail(r) (path: statepath:   nearest checkpoint), or None: zero;
                               replayed[r] = min(frontier, budget)  the path's tokens are replayed[r]
    offload_state(p)           offload_ckpt(p)                      payload moved to the host
    prefetch_state(p)          prefetch_ckpt(p), land_ckpt(p)       payload moved back
    drop_state(p)              drop_ckpt(p)                         payload discarded
    recover(plan)              ckpt assignments on the prefetch path: prefetch_state

A checkpoint is usable when ``lookup.ready[ckpt]`` holds (saved, and taken at the page's current
generation: a page that moved tier, was recomputed or forgotten has a new generation).  Payloads
live in a ``CheckpointStore`` (their own store: a checkpoint is not part of a page's KV payload).

Longer than most: the part answers six calls, each a short run of spec events, plus its integrity
bookkeeping; split further, the calls would share their state through each other's names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from morphcache.spec import loader
from morphcache.spec.model import Spec

from .binding import lacking
from .ckptstore import CheckpointStore, MemoryCheckpointStore
from .compiler import CompiledSpec
from .config import RuntimeConfig
from .errors import BadInputError, ConfigError, DuplicateSequenceError, TierError
from .index import NominalHit
from .pages import PageDirectory
from .pipeline import Pipeline
from .plan import RecoveryPlan
from .readers import ReaderRecord, ReaderTable
from .statepath import RECOMPUTE, REPLAY_TAIL, RESTORE, RebuiltState, StateMetrics, StateMetricsSnapshot, StatePath

GDN_SPEC = Path(loader.__file__).resolve().parent / "gdn_hybrid.yaml"  # the shipped design with recurrent state

CKPT, RSTATE, APPROX, SGEN, REPLAYED, BUDGET, R = "ckpt", "rstate", "approx", "sgen", "replayed", "budget", "R"
STATES = {CKPT: ("none", "saved", "offloaded", "prefetching"), RSTATE: ("none", "exact", "approx"),
          APPROX: ("exact_only", "allowed")}
EVENTS = ("save", "restore", "recompute_state", "replay_tail", "opt_in", "offload_ckpt", "prefetch_ckpt",
          "land_ckpt", "drop_ckpt")
HOME = {"saved": "gpu", "prefetching": "gpu", "offloaded": "host"}  # ckpt state -> where the payload lives


def missing(spec: Spec) -> list[str]:
    """What the recurrent part needs from ``spec`` and it lacks."""
    ready = [] if CKPT in spec.lookup.ready else ["lookup ready[ckpt]"]
    return lacking(spec, STATES, EVENTS, (SGEN, REPLAYED, BUDGET), (R,)) + ready


class NoRecurrentState:
    """The part for a spec without recurrent state: lookups carry no state path, calls are refused."""

    objects: frozenset[str] = frozenset()

    def path(self, pages: Sequence[int], pos: int, owner: str | None) -> StatePath | None:
        return None

    def path_of(self, hit: NominalHit, pos: int, owner: str | None) -> StatePath | None:
        return None

    def _refuse(self) -> ConfigError:
        return ConfigError("this spec has no recurrent state (objects ckpt, rstate, approx): run spec/gdn_hybrid.yaml")

    def opt_in(self, name: str, budget: int | None = None) -> None:
        raise self._refuse()

    def plan(self, reader: ReaderRecord, exact: bool = False) -> StatePath:
        raise self._refuse()

    def rebuild(self, reader: ReaderRecord, exact: bool = False) -> RebuiltState:
        raise self._refuse()

    def save(self, reader: ReaderRecord, payload: object) -> int:
        raise self._refuse()

    def offload(self, pid: int) -> None:
        raise self._refuse()

    def prefetch(self, pid: int) -> None:
        raise self._refuse()

    def drop(self, pid: int) -> None:
        raise self._refuse()

    def recover(self, plan: RecoveryPlan) -> Counter[str]:
        return Counter()

    def snapshot(self, requested_tokens: int) -> StateMetricsSnapshot | None:
        return None

    def problems(self) -> list[str]:
        return []


class RecurrentStates:
    """Checkpoints, readers' recurrent states and opt-ins, fired as spec events (module docstring)."""

    objects = frozenset({CKPT})

    def __init__(self, cspec: CompiledSpec, pipe: Pipeline, pages: PageDirectory, readers: ReaderTable,
                 config: RuntimeConfig, checkpoints: CheckpointStore | None = None) -> None:
        self.cspec, self.pipe, self.pages, self.readers = cspec, pipe, pages, readers
        self.store = pipe.store
        self.C = config.page_size
        self.R = cspec.constants[R]
        self.checkpoints: CheckpointStore = checkpoints if checkpoints is not None else MemoryCheckpointStore()
        self.metrics = StateMetrics()
        self._ready = cspec.lookup.ready[CKPT]
        self._names: dict[str, Any] = dict(cspec.constants)
        codes = cspec.codes
        self._allowed = codes[APPROX]["allowed"]
        self._exact = codes[RSTATE]["exact"]
        self._ckpt_state = cspec.state_names[CKPT]
        self._stale_scan = 64

    # -- planning ---------------------------------------------------------------------------------
    def usable(self, pid: int) -> bool:
        """The spec's ``lookup.ready[ckpt]`` for page ``pid``: saved at its current generation."""
        self._names["p"] = pid
        return bool(self._ready(self._names, self.store.arrays))

    def allowed(self, reader: ReaderRecord | None) -> bool:
        """Whether the reader opted in to an approximate state (``approx[r] == 'allowed'``)."""
        return reader is not None and self.store.reader(APPROX, reader.rid) == self._allowed

    def budget(self, reader: ReaderRecord | None) -> int | None:
        """The reader's replay budget (spec ``budget[r]``) if it opted in, else None (exact only)."""
        if not self.allowed(reader):
            return None
        assert reader is not None
        return int(self.store.reader(BUDGET, reader.rid))

    def choose(self, pages: Sequence[int], pos: int, budget: int | None) -> StatePath:
        """The path to the state at ``pos`` over ``pages`` (block order) for a reader with replay
        ``budget`` (None: exact only): see ``statepath.py``."""
        k = min(pos // self.C, len(pages)) - 1
        while k >= 0 and not self.usable(pages[k]):
            k -= 1
        if k >= 0 and (k + 1) * self.C == pos:
            exact = StatePath(RESTORE, True, pos, pos, pages[k], k)
        elif k >= 0:
            exact = StatePath(RECOMPUTE, True, pos, (k + 1) * self.C, pages[k], k)
        else:
            exact = StatePath(RECOMPUTE, True, pos, 0)
        if budget is not None and exact.tokens > budget:
            return StatePath(REPLAY_TAIL, False, pos, pos - budget)
        return exact

    def path(self, pages: Sequence[int], pos: int, owner: str | None) -> StatePath | None:
        """The path a lookup's answer carries: for ``owner``'s opt-in (an anonymous reader: exact only)."""
        reader = self.readers.by_name.get(owner) if owner is not None else None
        return self.choose(pages, pos, self.budget(reader))

    def path_of(self, hit: NominalHit, pos: int, owner: str | None) -> StatePath | None:
        """``path`` over the pages of a nominal hit."""
        return self.path(hit.pages, pos, owner)

    def plan(self, reader: ReaderRecord, exact: bool = False) -> StatePath:
        """The path ``rebuild`` would take now for the reader's state at its frontier (``exact``: an
        exact path even if the reader opted in); changes nothing."""
        budget = None if exact else self.budget(reader)
        return self.choose(reader.block, self.store.reader("frontier", reader.rid), budget)

    # -- events -----------------------------------------------------------------------------------
    def opt_in(self, name: str, budget: int | None = None) -> None:
        """Spec ``opt_in`` for the (idle) reader ``name``, before its ``register``, with its replay
        budget (tokens, at most the spec's R; None: R).  A reader that already opted in keeps its budget
        (asking for another is bad input)."""
        n = self.R if budget is None else budget
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self.R:
            raise BadInputError(f"sequence {name!r}: a replay budget is an int in [0, {self.R}] tokens "
                                f"(the spec's R), got {budget!r}")
        reader = self.readers.named(name)
        if self.readers.active(reader):
            raise DuplicateSequenceError(f"sequence {name!r} is already registered")
        held = self.budget(reader)
        if held is not None:
            if held != n:
                raise BadInputError(f"sequence {name!r} opted in with a replay budget of {held} tokens, not {n}")
            return
        try:
            self.pipe.fire("opt_in", reader.rid, params={"n": n})
            self.metrics.opt_ins += 1
        except BaseException:
            self.readers.retire_if_idle(reader)
            raise

    def rebuild(self, reader: ReaderRecord, exact: bool = False) -> RebuiltState:
        """Make the reader's state at its frontier: fire ``restore`` / ``recompute_state`` /
        ``replay_tail`` (the spec's guard decides; ``exact``: never the replay) and return the payload
        to load.  The event that fired decides whether the state is exact (``rstate[r]`` after it)."""
        path = self.plan(reader, exact)
        rid = reader.rid
        if path.kind == RESTORE:
            self.pipe.fire("restore", rid, path.page)
        elif path.kind == RECOMPUTE:
            self.pipe.fire("recompute_state", rid)
        else:
            self.pipe.fire("replay_tail", rid)
            replayed = self.store.reader(REPLAYED, rid)
            path = StatePath(REPLAY_TAIL, False, path.position, path.position - replayed)
        exact = self.store.reader(RSTATE, rid) == self._exact
        if exact != path.exact:
            path = StatePath(path.kind, exact, path.position, path.start, path.page, path.block)
        self.metrics.rebuilt(path)
        payload = self.checkpoints.get(path.page) if path.page is not None else None
        return RebuiltState(path, payload)

    def save(self, reader: ReaderRecord, payload: object) -> int:
        """Spec ``save`` of the reader's state at its frontier (a page end) as the checkpoint of the page
        ending there; returns the page id.  The guard refuses a state that is not exact."""
        frontier = self.store.reader("frontier", reader.rid)
        if frontier == 0 or frontier % self.C:
            raise BadInputError(f"{reader!r}: a checkpoint is taken at a page end; the frontier is {frontier}")
        pid = reader.block[frontier // self.C - 1]
        self.pipe.fire("save", reader.rid, pid)
        self.checkpoints.put(pid, payload)
        self.metrics.saves += 1
        if len(self.checkpoints.homes()) >= self._stale_scan:
            self.drop_stale()
        return pid

    def _live(self, pid: int) -> None:
        if pid not in self.pages:
            raise TierError(f"page {pid} is not live")

    def offload(self, pid: int) -> None:
        """Spec ``offload_ckpt``: the page's checkpoint payload goes to the host."""
        self._live(pid)
        self.pipe.fire("offload_ckpt", None, pid)
        self.checkpoints.move(pid, "host")
        self.metrics.offloaded += 1

    def prefetch(self, pid: int) -> None:
        """Spec ``prefetch_ckpt`` then ``land_ckpt``: the payload back on the GPU (one transaction)."""
        self._live(pid)
        with self.pipe.atomic():
            self.pipe.fire("prefetch_ckpt", None, pid)
            self.pipe.fire("land_ckpt", None, pid)
        self.checkpoints.move(pid, "gpu")
        self.metrics.prefetched += 1

    def drop(self, pid: int) -> None:
        """Spec ``drop_ckpt``: the checkpoint's payload is discarded."""
        self._live(pid)
        self.pipe.fire("drop_ckpt", None, pid)
        self.checkpoints.discard(pid)
        self.metrics.dropped += 1

    def drop_stale(self) -> int:
        """Drop the checkpoints of live pages taken at an older generation (they can never be used
        again); returns how many.  Scanned when the store has grown to twice what the last scan kept."""
        stale = [pid for pid in list(self.checkpoints.homes())
                 if pid in self.pages and self.store.page(SGEN, pid) != self.store.page("gen", pid)]
        for pid in stale:
            self.drop(pid)
        self._stale_scan = max(64, 2 * len(self.checkpoints.homes()))
        return len(stale)

    def recover(self, plan: RecoveryPlan) -> Counter[str]:
        """Carry out the plan's checkpoint assignments: prefetch brings an offloaded checkpoint back;
        recompute is left to ``rebuild_state`` (recompute_state from the nearest usable checkpoint)."""
        done: Counter[str] = Counter()
        for a in plan.state_assignments:
            if a.path == "prefetch" and a.page in self.pages:
                self.prefetch(a.page)
                done["prefetch_ckpt"] += 1
        return done

    # -- observation ------------------------------------------------------------------------------
    def snapshot(self, requested_tokens: int) -> StateMetricsSnapshot | None:
        """The counters, rates over ``requested_tokens``."""
        return self.metrics.snapshot(requested_tokens)

    def problems(self) -> list[str]:
        """Bookkeeping disagreements: every page id's checkpoint state against where its payload is."""
        out: list[str] = []
        store = self.store
        homes = self.checkpoints.homes()
        ids = list(store.live_pages) + list(store.free_page_ids)
        for pid in ids:
            state = self._ckpt_state[store.page(CKPT, pid)]
            want = HOME.get(state)
            if homes.get(pid) != want:
                out.append(f"page {pid}: checkpoint '{state}' but its payload is on {homes.get(pid) or 'no tier'}")
        extra = set(homes) - set(ids)
        if extra:
            out.append(f"checkpoint payloads of unknown page ids {sorted(extra)[:5]}")
        return out


RecurrentPart = RecurrentStates | NoRecurrentState


def recurrent_part(cspec: CompiledSpec, pipe: Pipeline, pages: PageDirectory, readers: ReaderTable,
                   config: RuntimeConfig) -> RecurrentPart:
    """``RecurrentStates`` for a spec with recurrent state, ``NoRecurrentState`` for one with none of it;
    ConfigError naming what a spec with part of it lacks."""
    spec = cspec.spec
    lacks = missing(spec)
    if not any(obj in spec.objects for obj in STATES):
        return NoRecurrentState()
    if lacks:
        raise ConfigError(f"spec '{spec.name}' declares recurrent state but lacks: {', '.join(lacks)}")
    return RecurrentStates(cspec, pipe, pages, readers, config)
