"""CacheManager: the API an engine embeds, a thin facade over the runtime's parts (``parts.py``).

Every call checks its input, takes the manager's lock and hands the work to one part; every state
change inside is a spec event fired through the one pipeline.  This module is longer than most: it
is the whole public surface, one short method per call, with the docstring the engine reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from collections.abc import Sequence as Seq
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

from morphcache.spec.model import Spec

from .config import RuntimeConfig
from .errors import BadInputError
from .inputs import check_device, check_items, check_limit, check_seq_id, check_timeout, check_tokens, one_token_each
from .integrity import check_integrity
from .lease import Lease, ReadView
from .metrics import MetricsSnapshot
from .parts import Parts
from .plan import LookupResult, Probe, RecoveryPlan, RecoveryReport
from .recorder import Step
from .sequences import Spans
from .statepath import RebuiltState, StatePath
from .store import PageStore


def check_flag(value: object, name: str) -> None:
    """BadInputError unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise BadInputError(f"{name} must be a bool, got {value!r}")


class CacheManager:
    """A guarded prefix cache for hybrid-attention KV, compiled from a spec.

    ``CacheManager(spec=None, config=None, store=None)``: ``spec`` a Spec or a spec file path (default
    ``binding.SHIPPED_SPEC``), ``config`` a RuntimeConfig, ``store`` the GPU pool's data plane
    (default: an in-memory store of deterministic payloads).
    """

    def __init__(self, spec: Spec | str | Path | None = None, config: RuntimeConfig | None = None,
                 store: PageStore | None = None) -> None:
        self.parts = Parts.build(spec, config or RuntimeConfig(), store)
        p = self.parts
        self.config = p.config
        self.spec = p.cspec.spec
        self.constants = p.cspec.constants
        self.lock = p.lock
        self.store = p.storage.data
        self.C = p.config.page_size
        self.page_bytes = p.page_bytes
        self.ident = p.ident

    # -- sequences ----------------------------------------------------------------------------------
    def register(self, seq_id: str, tokens: Seq[int] = (), *, types: Spans = None, session: str | None = None,
                 task: str | None = None, approximate: bool = False, replay_budget: int | None = None) -> int:
        """Create a sequence (spec ``register``), then append ``tokens`` (``types``: ``(start, end,
        type_name)`` spans over them); ``session``/``task`` label its pages.  ``approximate`` (a spec
        with recurrent state): the request opts in to an approximate state first (spec ``opt_in``), with
        ``replay_budget`` tokens (at most the spec's R; None: R) as the most a tail replay of its state
        recomputes.  Returns its frontier."""
        name = check_seq_id(seq_id)
        toks = tokens if tokens.__class__ is tuple and not tokens else check_tokens(tokens)  # (none: nothing to read)
        check_flag(approximate, "approximate")
        if replay_budget is not None and not approximate:
            raise BadInputError(f"sequence {name!r}: a replay budget is given only with approximate=True")
        with self.lock:
            if approximate:
                self.parts.recurrent.opt_in(name, replay_budget)
            return self.parts.sequences.register(name, toks, types, session, task)

    def append(self, seq_id: str, tokens: Seq[int], *, types: Spans = None) -> int:
        """Write ``tokens`` at the sequence's frontier (open, append, seal; all or none); returns the new
        frontier."""
        toks = check_tokens(tokens)
        with self.lock:
            return self.parts.sequences.append(self.parts.readers.sequence(seq_id), toks, types)

    def append_batch(self, items: Mapping[str, Seq[int]]) -> None:
        """``append`` for many sequences under one lock (a decode step).  Sequences are independent: a
        refusal for one does not stop the others; the first refusal is raised at the end."""
        if not isinstance(items, Mapping):
            raise BadInputError(f"items must map sequence ids to tokens, got {type(items).__name__}")
        names: list[str] = list(items)
        tokens: list[Seq[int]] = list(items.values())
        single = one_token_each(names, tokens)
        if single is None:
            names = [check_seq_id(sid) for sid in names]
            tokens = [check_tokens(toks) for toks in tokens]
        with self.lock:
            recs = self.parts.readers.sequence_many(names)
            errors = self.parts.sequences.append_many(recs, tokens, single)
        if errors:
            raise errors[0]

    def attach(self, seq_id: str, lease: Lease, *, types: Spans = None) -> int:
        """Start an empty sequence with a leased prefix (whole pages shared, a partial page copied);
        the lease stays held.  ``types``: ``(start, end, type_name)`` spans over the lease's tokens;
        the copied partial page carries those of its tokens.  Returns the frontier."""
        with self.lock:
            reader = self.parts.readers.sequence(seq_id)
            return self.parts.sequences.attach(reader, self.parts.leases.own(lease), types)

    def free(self, seq_id: str) -> None:
        """End a sequence: its pages leave its block table, its sealed pages are proposed for the pool,
        pages nothing holds are forgotten.  Its leases stay until released."""
        with self.lock:
            self.parts.sequences.free(self.parts.readers.sequence(seq_id))

    def frontier(self, seq_id: str) -> int:
        """Tokens written to the sequence."""
        with self.lock:
            return self.parts.sequences.frontier(self.parts.readers.sequence(seq_id))

    def sequence_pages(self, seq_id: str) -> tuple[int, ...]:
        """The sequence's page ids in block order."""
        with self.lock:
            return tuple(self.parts.readers.sequence(seq_id).block)

    def sequences(self) -> tuple[str, ...]:
        """Ids of the live sequences."""
        with self.lock:
            return tuple(rec.name for rec in self.parts.readers.sequences() if rec.name is not None)

    # -- lookups and leases -------------------------------------------------------------------------
    def lookup(self, tokens: Seq[int], *, limit: int | None = None, owner: str | None = None) -> LookupResult:
        """Miss, NeedsRecovery(plan) or Ready(lease) for the longest cached prefix of ``tokens`` (at most
        ``limit``).  Ready pins the hit's whole pages for ``owner`` (a sequence id; an anonymous reader
        when None)."""
        toks = check_tokens(tokens)
        lim = check_limit(limit)
        if owner is not None:
            check_seq_id(owner)
        with self.lock:
            return self.parts.lookups.lookup(toks, lim, owner)

    def probe(self, tokens: Seq[int], *, limit: int | None = None) -> Probe:
        """Nominal and effective hit of ``tokens`` and what blocks the nominal one; changes nothing."""
        toks = check_tokens(tokens)
        lim = check_limit(limit)
        with self.lock:
            return self.parts.lookups.probe(toks, lim)

    def recover(self, plan: RecoveryPlan, *, block: bool = True) -> RecoveryReport:
        """Carry out a plan: prefetch (waiting for the copies when ``block``), recompute, compress and
        index.  Refusals are reported, not raised; look up again to get the lease."""
        if not isinstance(plan, RecoveryPlan):
            raise BadInputError(f"expected a RecoveryPlan, got {type(plan).__name__}")
        report = self.parts.recovery.recover(plan, block)
        if not plan.state_assignments:
            return report
        with self.lock:
            done = self.parts.recurrent.recover(plan)
        return replace(report, done=dict(Counter(report.done) + done))

    def acquire(self, seq_id: str) -> Lease:
        """A lease over the sequence's whole pages (spec ``acquire``) and its partial last page
        (``acquire_tail``)."""
        with self.lock:
            reader = self.parts.readers.sequence(seq_id)
            frontier = self.parts.sequences.frontier(reader)
            nfull = frontier // self.C
            tail = reader.block[nfull] if nfull < len(reader.block) else None
            return self.parts.leases.acquire(reader, reader.block[:nfull], frontier, None, tail)

    def read(self, lease: Lease, *, payloads: bool = False) -> ReadView:
        """Re-validate every pinned page now (spec ``read``); StaleLeaseError if one is refused."""
        with self.lock:
            return self.parts.leases.validate(self.parts.leases.own(lease), payloads)

    def release(self, lease: Lease) -> None:
        """Unpin the lease's pages; LeaseReleasedError the second time, ForeignLeaseError for a lease of
        another manager."""
        with self.lock:
            self.parts.leases.release(self.parts.leases.own(lease))

    def kernel_lease(self, leases: Iterable[Lease], device: Any = "cpu") -> Any:
        """A ``KernelLease`` (block table, generations, lengths as int32 tensors on ``device``, the
        device of the engine's page pools) for the read kernels; its ``check_live`` re-validates every
        lease through ``read``."""
        from .kernel_lease import RuntimeKernelLease

        target = check_device(device)
        with self.lock:
            owned = [self.parts.leases.own(lease) for lease in check_items(leases, "leases")]
            rows = self.parts.leases.rows(owned, self.C)
        return RuntimeKernelLease(self, owned, *rows, device=target)

    # -- morphology, window, tiers ------------------------------------------------------------------
    def compress(self, pid: int) -> None:
        """Build the compressed entry and indexer keys of a sealed page."""
        with self.lock:
            self.parts.morph.compress(self.parts.pages.get(pid).pid)

    def recompress(self, pid: int) -> None:
        """Rebuild a page's compressed entry from its raw tail (indexer keys must then be rebuilt)."""
        with self.lock:
            self.parts.morph.recompress(self.parts.pages.get(pid).pid)

    def build_index(self, pid: int) -> None:
        """(Re)build the page's indexer keys for its current compressed entry."""
        self._fire("build_index", pid)

    def release_tail(self, pid: int) -> None:
        """Free the raw tail of a compressed page."""
        self._fire("release_tail", pid)

    def _fire(self, event: str, pid: int) -> None:
        with self.lock:
            self.parts.pipe.fire(event, None, self.parts.pages.get(pid).pid)

    def slide(self, seq_id: str) -> int:
        """Propose ``slide`` for every live window of the sequence; returns how many slid."""
        with self.lock:
            return self.parts.sequences.slide(self.parts.readers.sequence(seq_id))

    def offload(self, pid: int, to: str = "host") -> None:
        """Move a GPU page to the host (or on to disk); the spec refuses pinned or unsealed pages."""
        with self.lock:
            self.parts.tiers.offload(self.parts.pages.get(pid).pid, to)

    def prefetch(self, pid: int) -> Future[None]:
        """Start copying a host/disk page back to the GPU; the future completes once it landed or was
        found corrupt."""
        with self.lock:
            return self.parts.prefetcher.prefetch(self.parts.pages.get(pid).pid)

    def wait_prefetches(self, timeout: float | None = None) -> None:
        """Block until every copy in flight has landed or failed."""
        self.parts.prefetcher.wait(check_timeout(timeout))

    def drop(self, pid: int) -> None:
        """Forget a page's payload (spec ``drop``); recompute is its way back."""
        with self.lock:
            self.parts.tiers.drop(self.parts.pages.get(pid).pid)

    def evict(self, pid: int) -> None:
        """Take a page out of the reuse pool (spec ``evict``); it is forgotten once nothing holds it."""
        with self.lock:
            self.parts.tiers.evict(self.parts.pages.get(pid).pid)

    def admit(self, pid: int) -> bool:
        """Propose the page for the reuse pool; True if the spec admitted it."""
        with self.lock:
            return self.parts.morph.admit(self.parts.pages.get(pid).pid)

    def cached_pages(self) -> tuple[int, ...]:
        """Pages in the reuse pool, in admission order."""
        with self.lock:
            return tuple(self.parts.morph.pooled)

    @property
    def pooled(self) -> tuple[int, ...]:
        """The same as ``cached_pages()``."""
        return self.cached_pages()

    @property
    def disk(self) -> Any:
        """The disk tier (a page's record in its slab: ``disk.locate(pid)``), None when there is none."""
        return self.parts.storage.disk

    @property
    def host(self) -> Any:
        """The host tier."""
        return self.parts.storage.host

    # -- recurrent state (a spec with ckpt / rstate / approx, e.g. spec/gdn_hybrid.yaml) -----------
    @property
    def has_recurrent_state(self) -> bool:
        """Whether the spec declares recurrent state (the ``*_state`` calls below work)."""
        return bool(self.parts.recurrent.objects)

    def state_path(self, seq_id: str, *, exact: bool = False) -> StatePath:
        """How ``rebuild_state`` would make the sequence's recurrent state at its frontier; changes
        nothing."""
        check_flag(exact, "exact")
        with self.lock:
            return self.parts.recurrent.plan(self.parts.readers.sequence(seq_id), exact)

    def rebuild_state(self, seq_id: str, *, exact: bool = False) -> RebuiltState:
        """Make the sequence's recurrent state at its frontier (spec ``restore`` at a checkpointed page
        end, ``recompute_state`` from the nearest checkpoint, or ``replay_tail`` if it opted in and
        ``exact`` is False); returns the path (``exact`` as the fired event decided) and the checkpoint
        payload to start from (None: the zero state)."""
        check_flag(exact, "exact")
        with self.lock:
            return self.parts.recurrent.rebuild(self.parts.readers.sequence(seq_id), exact)

    def save_state(self, seq_id: str, payload: object) -> int:
        """Checkpoint the sequence's exact state at its frontier, a page end (spec ``save``); returns the
        page whose checkpoint it became."""
        with self.lock:
            return self.parts.recurrent.save(self.parts.readers.sequence(seq_id), payload)

    def offload_state(self, pid: int) -> None:
        """Move the page's checkpoint to the host (spec ``offload_ckpt``)."""
        with self.lock:
            self.parts.recurrent.offload(self.parts.pages.get(pid).pid)

    def prefetch_state(self, pid: int) -> None:
        """Bring the page's checkpoint back (spec ``prefetch_ckpt``, ``land_ckpt``)."""
        with self.lock:
            self.parts.recurrent.prefetch(self.parts.pages.get(pid).pid)

    def drop_state(self, pid: int) -> None:
        """Discard the page's checkpoint (spec ``drop_ckpt``)."""
        with self.lock:
            self.parts.recurrent.drop(self.parts.pages.get(pid).pid)

    # -- graph capture ------------------------------------------------------------------------------
    def capture(self, seq_ids: Iterable[str]) -> None:
        """Capture a batch for graph replay: its block tables are frozen until ``uncapture``."""
        with self.lock:
            readers = [self.parts.readers.sequence(s) for s in check_items(seq_ids, "seq_ids")]
            self.parts.sequences.graph("capture", readers)

    def uncapture(self, seq_ids: Iterable[str]) -> None:
        """End the capture of a batch."""
        with self.lock:
            readers = [self.parts.readers.sequence(s) for s in check_items(seq_ids, "seq_ids")]
            self.parts.sequences.graph("uncapture", readers)

    # -- observability ------------------------------------------------------------------------------
    def metrics(self) -> MetricsSnapshot:
        """Hit rates, gaps, recoveries, bytes moved, event counts, policy refusals and occupancy."""
        with self.lock:
            return self.parts.snapshot()

    def page_ids(self) -> tuple[int, ...]:
        """Ids of the live pages."""
        with self.lock:
            return tuple(self.parts.pages)

    def page_state(self, pid: int) -> dict[str, Any]:
        """Every spec value of the page (decoded), plus its chain facts."""
        with self.lock:
            return self.parts.page_state(pid)

    def page_values(self, pids: Seq[int], names: Seq[str]) -> dict[str, list[Any]]:
        """Named values of many live pages (spec page values decoded, and ``gpu_slot``): one list per
        name, in ``pids`` order; what ``page_state`` says of each, without decoding every field."""
        pages, wanted = check_items(pids, "pages"), check_items(names, "names")
        with self.lock:
            return self.parts.page_values(pages, wanted)

    def version(self) -> int:
        """A number that moves whenever a spec event that changes state fires (``Pipeline.version``);
        while it stays the same, so do every page's spec values and GPU slot, and a check of them made
        at that number still holds."""
        with self.lock:
            return self.parts.pipe.version()

    def check_integrity(self) -> None:
        """Evaluate every spec invariant (that reads no ghost) on the live state, plus the runtime's own
        bookkeeping; IntegrityError lists each disagreement."""
        with self.lock:
            check_integrity(self)

    def steps(self) -> list[Step]:
        """The steps recorded since the last call (RuntimeConfig.record)."""
        with self.lock:
            return self.parts.pipe.recorder.take()

    def close(self) -> None:
        """Wait for copies in flight and stop the worker threads."""
        self.wait_prefetches()
        self.parts.prefetcher.close()
        self.parts.tiers.close()

    def __enter__(self) -> CacheManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

