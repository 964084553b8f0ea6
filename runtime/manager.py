"""CacheManager: the API an engine embeds.  Every call takes the manager's lock; every state change
inside is a spec event fired through ``Core.fire``.

Writing sequences lives in writing.py, lookups and leases in lookups.py, tier moves in tiering.py;
this class adds the public calls for leases, morphology, tiers, graph capture and observability.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence as Seq
from concurrent.futures import Future, wait
from typing import Any

from . import binding as B
from .core import Sequence
from .errors import BadInputError, GuardRefused
from .integrity import check_integrity
from .lease import Lease
from .lookups import ReadView, check_tokens
from .metrics import MetricsSnapshot
from .plan import LookupResult, Probe, RecoveryPlan, RecoveryReport
from .recorder import Step
from .writing import WritingOps


class CacheManager(WritingOps):
    """A guarded prefix cache for hybrid-attention KV, compiled from a spec.

    ``CacheManager(spec=None, config=None, store=None)``: ``spec`` a Spec or a spec file path (default
    the shipped ``hybrid.yaml``), ``config`` a RuntimeConfig, ``store`` the GPU pool's data plane
    (default: an in-memory store of deterministic payloads).
    """

    # -- lookups and leases -------------------------------------------------------------------------
    def lookup(self, tokens: Seq[int], *, limit: int | None = None, owner: str | None = None) -> LookupResult:
        """Miss, NeedsRecovery(plan) or Ready(lease) for the longest cached prefix of ``tokens``
        (at most ``limit`` tokens).  Ready pins the whole pages of the hit."""
        toks = check_tokens(tokens)
        _check_limit(limit)
        with self.lock:
            return self._lookup(toks, limit, owner)

    def probe(self, tokens: Seq[int], *, limit: int | None = None) -> Probe:
        """Nominal and effective hit of ``tokens`` and what blocks the nominal one; changes nothing
        (no pins, no metrics)."""
        toks = check_tokens(tokens)
        _check_limit(limit)
        with self.lock:
            return self._probe(toks, limit)

    def recover(self, plan: RecoveryPlan, *, block: bool = True) -> RecoveryReport:
        """Carry out a plan: prefetch (waiting for the copies when ``block``), recompute, compress and
        index; then look up again to get the lease.  Refusals are reported, not raised."""
        if not isinstance(plan, RecoveryPlan):
            raise BadInputError(f"expected a RecoveryPlan, got {type(plan).__name__}")
        return self._recover(plan, block)

    def acquire(self, seq_id: str) -> Lease:
        """A lease over the sequence's whole pages (its filling page rides along unpinned)."""
        with self.lock:
            seq = self._seq(seq_id)
            nfull = seq.frontier // self.C
            tail = seq.block[nfull] if nfull < len(seq.block) else None
            return self._acquire(tuple(seq.block[:nfull]), seq.frontier, seq_id, None, tail)

    def read(self, lease: Lease, *, payloads: bool = False) -> ReadView:
        """Re-validate every leased page at the moment of use (spec ``read``); StaleLeaseError if one is
        no longer readable at its leased generation."""
        with self.lock:
            return self._validate(self._own(lease), payloads)

    def release(self, lease: Lease) -> None:
        """Unpin the lease's pages; LeaseReleasedError the second time, ForeignLeaseError for a lease
        of another manager."""
        with self.lock:
            self._release(self._own(lease))

    def kernel_lease(self, leases: Iterable[Lease], device: Any = "cpu") -> Any:
        """A ``KernelLease`` (block table, generations, lengths as int32 tensors on ``device``, the
        device of the engine's page pools) for the read kernels."""
        import torch

        from .kernel_lease import RuntimeKernelLease

        try:
            target = torch.device(device)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise BadInputError(f"device must name a torch device, got {device!r} ({exc})") from None
        with self.lock:
            owned = [self._own(lease) for lease in _items(leases, "leases")]
            return RuntimeKernelLease.build(self, owned, target)

    # -- morphology, window, tiers ------------------------------------------------------------------
    def compress(self, pid: int) -> None:
        """Build the compressed entry and indexer keys of a sealed page (begin, finish, build_index)."""
        with self.lock:
            info = self._info(pid)
            if self.cols[B.COMPRESSED][pid] == "none":
                self._fire("begin_compress", pid)
                self.store.compress(info.gpu_slot)
            self._fire("finish_compress", pid)
            self._fire("build_index", pid)

    def recompress(self, pid: int) -> None:
        """Rebuild a page's compressed entry from its raw tail (indexer keys must then be rebuilt)."""
        with self.lock:
            info = self._info(pid)
            self._fire("recompress", pid)
            self.store.compress(info.gpu_slot)
            self._fire("finish_compress", pid)

    def build_index(self, pid: int) -> None:
        """(Re)build the page's indexer keys for its current compressed entry."""
        with self.lock:
            self._info(pid)
            self._fire("build_index", pid)

    def release_tail(self, pid: int) -> None:
        """Free the raw tail of a compressed page."""
        with self.lock:
            self._info(pid)
            self._fire("release_tail", pid)

    def slide(self, seq_id: str) -> int:
        """Propose ``slide`` for every live window of the sequence; returns how many slid."""
        with self.lock:
            seq = self._seq(seq_id)
            slid = 0
            for pid in seq.block[:-1]:
                if self.cols[B.WINDOW][pid] == "live" and self._try("slide", pid, seq, likely=False):
                    slid += 1
            return slid

    def offload(self, pid: int, to: str = "host") -> None:
        """Move a GPU page to the host (or on to disk); the spec refuses pinned or unsealed pages."""
        with self.lock:
            self._info(pid)
            self._offload(pid, to)

    def prefetch(self, pid: int) -> Future[None]:
        """Start copying a host/disk page back to the GPU; the future completes once it landed or was
        found corrupt."""
        with self.lock:
            self._info(pid)
            return self._prefetch(pid)

    def wait_prefetches(self, timeout: float | None = None) -> None:
        """Block until every prefetch in flight has landed or failed."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout >= 0):
            raise BadInputError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        with self.lock:
            futures = list(self.inflight.values())
        wait(futures, timeout)

    def drop(self, pid: int) -> None:
        """Forget a page's payload (spec ``drop``); recompute is its way back."""
        with self.lock:
            self._info(pid)
            self._drop(pid)
            self._collect(pid)

    def evict(self, pid: int) -> None:
        """Take a page out of the reuse pool (spec ``evict``); it is forgotten once nothing holds it."""
        with self.lock:
            self._info(pid)
            self._fire("evict", pid)
            self._collect(pid)

    def admit(self, pid: int) -> bool:
        """Propose the page for the reuse pool; True if the spec admitted it."""
        with self.lock:
            self._info(pid)
            return self._admit(pid)

    # -- graph capture ------------------------------------------------------------------------------
    def capture(self, seq_ids: Iterable[str]) -> None:
        """Capture a batch for graph replay: its block tables are frozen until ``uncapture``."""
        self._graph("capture", "uncapture", seq_ids)

    def uncapture(self, seq_ids: Iterable[str]) -> None:
        """End the capture of a batch."""
        self._graph("uncapture", "capture", seq_ids)

    def _graph(self, event: str, undo: str, seq_ids: Iterable[str]) -> None:
        with self.lock:
            seqs = [self._seq(s) for s in _items(seq_ids, "seq_ids")]
            done: list[Sequence] = []
            try:
                for seq in seqs:
                    self._fire(event, None, seq)
                    done.append(seq)
            except GuardRefused:
                for seq in done:
                    self._try(undo, None, seq)
                raise

    # -- observability ------------------------------------------------------------------------------
    def metrics(self) -> MetricsSnapshot:
        """A snapshot of hit rates, gaps, recoveries, bytes moved, event counts and occupancy."""
        with self.lock:
            s = self.stats
            s.extra["gpu_pages_used"] = self.slots.used
            s.extra["host_pages_used"] = len(self.host)
            s.extra["disk_pages_used"] = len(self.disk) if self.disk is not None else 0
            s.extra["pooled_pages"] = len(self.pooled)
            s.extra["live_pages"] = len(self.pages)
            s.extra["live_sequences"] = len(self.core.seqs)
            s.extra["live_leases"] = len(self.leases)
            return s.snapshot(self.core.fired, self.core.refused)

    def page_state(self, pid: int) -> dict[str, Any]:
        """Every spec value of the page, plus its chain facts."""
        with self.lock:
            info = self._info(pid)
            out: dict[str, Any] = {name: self.cols[name][pid] for name in self.cspec.page_names}
            out.update(depth=info.depth, tokens=tuple(info.tokens), gpu_slot=info.gpu_slot,
                       sequences=tuple(info.seqs), children=info.children)
            return out

    def check_integrity(self) -> None:
        """Evaluate every spec invariant on every live view, plus the runtime's own bookkeeping
        invariants; IntegrityError lists each disagreement."""
        with self.lock:
            check_integrity(self)

    def steps(self) -> list[Step]:
        """The steps recorded since the last call (RuntimeConfig.record)."""
        with self.lock:
            return self.core.recorder.take()

    def close(self) -> None:
        """Wait for copies in flight and stop the worker threads."""
        self.wait_prefetches()
        self.executor.shutdown(wait=True)

    def __enter__(self) -> CacheManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_limit(limit: object) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BadInputError(f"limit must be an int >= 0 or None, got {limit!r}")


def _items(values: object, what: str) -> list[Any]:
    """``values`` as a list; BadInputError unless it is an iterable other than a str or bytes."""
    if isinstance(values, (str, bytes)):
        raise BadInputError(f"{what} must be an iterable of items, not a single {type(values).__name__}")
    try:
        return list(values)  # type: ignore[call-overload]
    except TypeError:
        raise BadInputError(f"{what} must be an iterable, got {type(values).__name__}") from None
