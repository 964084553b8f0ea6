"""The runtime's parts, built and wired once per CacheManager.

::

                              CacheManager (facade, lock)
          ┌──────────────┬──────────┴───────┬──────────────┬──────────────┐
      Sequences       Lookups          LeaseBook       Recovery       Morphology
          │              │                 │               │              │
          └──────┬───────┴───────┬─────────┴───────┬───────┴──────┬───────┘
             TierMover       Collector        PolicySeam      PrefixIndex
                 │               │                 │
                 └───────────────┴──── Pipeline ───┘    (source, guard, effects, bounds, apply, record)
                                           │
                               StateStore  +  CompiledSpec  (columns; closures and numpy forms)

Each part holds the parts below it that it uses; none calls another's private names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from morphcache.spec.loader import load_spec
from morphcache.spec.model import Spec

from .binding import GEN, SHIPPED_SPEC, check_binding
from .collect import Busy, Collector
from .compiler import CompiledSpec
from .config import RuntimeConfig
from .errors import BadInputError
from .index import PrefixIndex
from .leases import LeaseBook
from .lookup import Lookups
from .metrics import Metrics, MetricsSnapshot
from .morphology import Morphology
from .pages import PageDirectory
from .pipeline import Pipeline
from .policy import make_policy
from .prefetch import Prefetcher
from .readers import ReaderTable
from .recovery import Recovery
from .recurrent import RecurrentPart, recurrent_part
from .seam import PolicySeam
from .sequences import Sequences
from .state import StateStore
from .store import MemoryPageStore, PageStore
from .tiering import TierMover
from .tiers import DiskTier, HostTier, SlotPool, Storage

ID_ROOM = 1 << 16  # page ids the columns hold from the start at most (they grow past it when needed)

_LOADED: dict[tuple[str, float], Spec] = {}
_COMPILED: dict[tuple[int, tuple[tuple[str, int], ...]], tuple[Spec, CompiledSpec]] = {}


def load(spec: Spec | str | Path | None) -> Spec:
    """The spec to run: ``SHIPPED_SPEC`` by default, a Spec, or a spec file (a file is loaded once per
    modification time)."""
    if isinstance(spec, Spec):
        return spec
    path = Path(SHIPPED_SPEC if spec is None else spec)
    try:
        key = (str(path.resolve()), path.stat().st_mtime)
    except OSError:
        return load_spec(path)  # the loader reports the missing file
    if key not in _LOADED:
        if len(_LOADED) > 64:
            _LOADED.clear()
        _LOADED[key] = load_spec(path)
    return _LOADED[key]


def compiled(spec: Spec, constants: dict[str, int]) -> CompiledSpec:
    """The spec compiled with ``constants``, shared by managers running the same spec object (a
    CompiledSpec never changes once built; analyses it memoizes are facts about it)."""
    key = (id(spec), tuple(sorted(constants.items())))
    hit = _COMPILED.get(key)
    if hit is None or hit[0] is not spec:
        if len(_COMPILED) > 64:
            _COMPILED.clear()
        hit = _COMPILED[key] = (spec, CompiledSpec(spec, constants))
    return hit[1]


@dataclass
class Parts:
    """Every part of one manager."""

    config: RuntimeConfig
    cspec: CompiledSpec
    lock: threading.RLock
    pipe: Pipeline
    pages: PageDirectory
    readers: ReaderTable
    index: PrefixIndex
    storage: Storage
    busy: Busy
    seam: PolicySeam
    collector: Collector
    tiers: TierMover
    prefetcher: Prefetcher
    morph: Morphology
    leases: LeaseBook
    lookups: Lookups
    sequences: Sequences
    recovery: Recovery
    metrics: Metrics
    page_bytes: int
    ident: int
    recurrent: RecurrentPart

    @classmethod
    def build(cls, spec: Spec | str | Path | None, config: RuntimeConfig, data: PageStore | None) -> Parts:
        """Compile the spec with the configuration's constants and wire the parts."""
        spec_ = load(spec)
        check_binding(spec_)
        cspec = compiled(spec_, config.spec_constants(spec_.constants))
        ids = min(config.gpu_pages + config.host_pages + config.disk_pages + 64, ID_ROOM)  # page ids made at once
        store = StateStore(cspec, page_capacity=ids)
        readers = ReaderTable(store)
        page_bound = -(-config.max_sequence_tokens // config.page_size) + 1
        pipe = Pipeline(cspec, store, backend=config.backend, record=config.record, strict=config.strict,
                        fast=config.fast, describe=readers.describe, page_bound=page_bound)
        lock = threading.RLock()
        pages = PageDirectory(ids)
        index = PrefixIndex(config.page_size)
        data = data if data is not None else MemoryPageStore(config.gpu_pages, config.page_size)
        disk = None if config.disk_dir is None else \
            DiskTier(config.disk_dir, config.disk_pages, config.page_bytes or data.page_bytes)
        storage = Storage(SlotPool(config.gpu_pages), data, HostTier(config.host_pages), disk)
        busy = Busy()
        seam = PolicySeam(make_policy(config.policy), pipe, pages, busy)
        collector = Collector(pipe, pages, index, busy, storage, seam)
        metrics = Metrics()
        tiers = TierMover(pipe, pages, storage, seam, busy, collector, metrics, config, lock)
        prefetcher = Prefetcher(pipe, pages, storage, seam, busy, collector, tiers, metrics, config, lock)
        morph = Morphology(pipe, pages, storage, seam, collector, config)
        ident = id(pipe)
        leases = LeaseBook(pipe, pages, readers, storage, collector, seam, ident)
        lookups = Lookups(cspec, store, index, pages, readers, leases, storage, seam, metrics, config)
        sequences = Sequences(pipe, pages, readers, index, storage, tiers, morph, collector, seam, config)
        recovery = Recovery(pipe, pages, tiers, prefetcher, morph, busy, collector, metrics, lock)
        lookups.states = recurrent = recurrent_part(cspec, pipe, pages, readers, config)
        parts = cls(config, cspec, lock, pipe, pages, readers, index, storage, busy, seam, collector, tiers,
                    prefetcher, morph, leases, lookups, sequences, recovery, metrics,
                    config.page_bytes or data.page_bytes, ident, recurrent)
        pipe.watch(GEN, parts.generation_watcher())
        readers.on_retire.append(pipe.names.inc.forget_reader)
        for agg in cspec.aggregates.values():
            for var in agg.reads:
                pipe.watch(var, pipe.names.dirty)
        return parts

    def generation_watcher(self) -> Callable[[Any], None]:
        """The watcher of ``gen``: ``publish_generation`` with what a single page's call reads bound
        once (most ``gen`` writes are one firing's, on one page; a batch's index goes to
        ``publish_generation``).  The directory's records, the store's columns and the data plane are
        the same objects for the manager's life (a column that grows is found again in ``cols``)."""
        get, cols, set_generation = self.pages.records.get, self.pipe.store.cols, self.storage.data.set_generation
        many, ndarray = self.publish_generation, np.ndarray

        def publish(index: Any) -> None:
            if index.__class__ is ndarray:
                many(index)
                return
            rec = get(index)
            if rec is not None:
                slot = rec.gpu_slot
                if slot >= 0:
                    set_generation(slot, cols[GEN][index])

        return publish

    def publish_generation(self, index: Any) -> None:
        """Tell the data plane the generation of pages on the GPU whose ``gen`` changed."""
        store, records, data = self.pipe.store, self.pages.records, self.storage.data
        if not isinstance(index, np.ndarray):  # one page (a single firing's)
            rec = records.get(index)
            if rec is not None and rec.gpu_slot >= 0:
                data.set_generation(rec.gpu_slot, store.cols[GEN][index])
            return
        for pid, gen in zip(index.tolist(), store.vecs[GEN][index].tolist(), strict=True):  # a batch's: one read
            rec = records.get(pid)
            if rec is not None and rec.gpu_slot >= 0:
                data.set_generation(rec.gpu_slot, gen)

    def snapshot(self) -> MetricsSnapshot:
        """The metrics with the occupancy of every tier."""
        extra = self.metrics.extra
        extra["gpu_pages_used"] = self.storage.slots.used
        extra["host_pages_used"] = len(self.storage.host)
        extra["disk_pages_used"] = len(self.storage.disk) if self.storage.disk is not None else 0
        extra["pooled_pages"] = len(self.morph.pooled)
        extra["live_pages"] = len(self.pages)
        extra["live_sequences"] = len(self.readers.sequences())
        extra["live_readers"] = len(self.readers.by_rid)
        extra["live_leases"] = len(self.leases)
        if self.storage.disk is not None:
            extra["disk_leftover_files"] = len(self.storage.disk.leftovers)
        snap = self.metrics.snapshot(self.pipe.fired, self.pipe.refused, self.seam.refusals, self.seam.victims)
        return replace(snap, state=self.recurrent.snapshot(snap.requested_tokens))

    def page_values(self, pids: Sequence[int], names: Sequence[str]) -> dict[str, list[Any]]:
        """Named values of many live pages at once, decoded as ``page_state`` gives them: a spec page
        value's column read once for all ``pids``, or ``gpu_slot`` from the records; one list per name."""
        recs = [self.pages.get(pid) for pid in pids]  # UnknownPageError for a page that is not live
        store, dec = self.pipe.store, self.cspec.decode
        out: dict[str, list[Any]] = {}
        for name in names:
            if name == "gpu_slot":
                out[name] = [rec.gpu_slot for rec in recs]
            elif isinstance(name, str) and name in store.page_names:
                col = store.vecs[name]
                out[name] = [dec(name, v) for v in col[list(pids)].tolist()] if pids else []
            else:
                raise BadInputError(f"page_values: no page value named {name!r} (spec page values and 'gpu_slot')")
        return out

    def page_state(self, pid: int) -> dict[str, Any]:
        """Every spec value of a live page (decoded), plus its chain facts."""
        rec = self.pages.get(pid)
        store, dec = self.pipe.store, self.cspec.decode
        out: dict[str, Any] = {name: dec(name, store.page(name, pid)) for name in store.page_names}
        holders = store.readers_at(("block",), pid)
        names = tuple(sorted(self.readers.by_rid[r].name or f"#{r}" for r in holders if r in self.readers.by_rid))
        out.update(tokens=tuple(rec.token_ids), gpu_slot=rec.gpu_slot, sequences=names, children=rec.children,
                   meta=rec.meta)
        return out
