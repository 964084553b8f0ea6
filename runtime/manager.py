"""CacheManager: the API an engine embeds.  Every call takes the manager's lock; every state change
inside is a spec event fired through ``Core.fire``.

Token and page arithmetic (C = page size)::

    tokens     0 .......... C-1 | C ......... 2C-1 | 2C ..... frontier-1 |
    blocks     [    page 0     ][     page 1      ][  page 2 (filling)  ]
    append     fires open at a page boundary, append per token, seal on the page's last token;
               a sealed page is hashed into the index, then compressed, indexed and admitted
               (each proposed, the spec decides), and pages W tokens behind slide out
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Sequence as Seq
from concurrent.futures import Future, wait
from typing import Any

from . import binding as B
from .core import Sequence
from .errors import BadInputError, DuplicateSequenceError, GuardRefused, MorphcacheError
from .index import chain_hash
from .integrity import check_integrity
from .lease import Lease
from .lookups import MAX_TOKEN, LookupOps, ReadView, check_tokens
from .metrics import MetricsSnapshot
from .plan import LookupResult, Probe, RecoveryPlan, RecoveryReport
from .recorder import Step


class CacheManager(LookupOps):
    """A guarded prefix cache for hybrid-attention KV, compiled from a spec.

    ``CacheManager(spec=None, config=None, store=None)``: ``spec`` a Spec or a spec file path (default
    the shipped ``hybrid.yaml``), ``config`` a RuntimeConfig, ``store`` the GPU pool's data plane
    (default: an in-memory store of deterministic payloads).
    """

    # -- sequences ----------------------------------------------------------------------------------
    def register(self, seq_id: str, tokens: Seq[int] = ()) -> int:
        """Create an empty sequence (then append ``tokens``); returns its frontier."""
        if not isinstance(seq_id, str) or not seq_id:
            raise BadInputError(f"sequence id must be a non-empty str, got {seq_id!r}")
        toks = check_tokens(tokens)
        with self.lock:
            if seq_id in self.core.seqs:
                raise DuplicateSequenceError(f"sequence {seq_id!r} is already registered")
            seq = self.core.new_sequence(seq_id)
            if toks:
                self._append(seq, toks)
            return seq.frontier

    def append(self, seq_id: str, tokens: Seq[int]) -> int:
        """Write ``tokens`` at the sequence's frontier (opening, filling and sealing pages); returns the
        new frontier.  Tokens accepted before a refusal stay written."""
        toks = check_tokens(tokens)
        with self.lock:
            seq = self._seq(seq_id)
            self._append(seq, toks)
            return seq.frontier

    def append_batch(self, items: Mapping[str, Seq[int]]) -> None:
        """``append`` for many sequences under one lock acquisition (one decoding step).

        Sequences are independent: a refusal for one does not stop the others; the first refusal is
        raised once every sequence was processed.
        """
        checked: list[tuple[str, Seq[int]]] = []
        for sid, toks in items.items():
            if toks.__class__ is list and len(toks) == 1 and toks[0].__class__ is int and 0 <= toks[0] <= MAX_TOKEN:
                checked.append((sid, toks))  # the decode step's one token, already valid
            else:
                checked.append((self._seq_id(sid), check_tokens(toks)))
        with self.lock:
            seqs = [self._seq(sid) for sid, _ in checked]
            simple: list[tuple[Sequence, int, int]] = []
            rest: list[tuple[Sequence, Seq[int]]] = []
            info = self.pages.info
            last = self.C - 1
            limit = self.config.max_sequence_tokens
            for seq, (_, toks) in zip(seqs, checked, strict=True):
                block = seq.block
                if len(toks) == 1 and block and len(info[block[-1]].tokens) < last and seq.frontier < limit:
                    simple.append((seq, block[-1], toks[0]))
                else:
                    rest.append((seq, toks))
            done = self.core.fire_own_many("append", [s[1] for s in simple], [s[0] for s in simple]) \
                if self._fire_own == self.core.fire_own else 0
            write = self.store.write_tokens
            for _seq, pid, token in simple[:done]:
                page = info[pid]
                page.tokens.append(token)
                write(page.gpu_slot, page.depth, len(page.tokens) - 1, (token,))
            rest += [(seq, [token]) for seq, _, token in simple[done:]]
            errors: list[MorphcacheError] = []
            for seq, toks in rest:
                try:
                    self._append(seq, toks)
                except MorphcacheError as exc:
                    errors.append(exc)
            if errors:
                raise errors[0]

    @staticmethod
    def _seq_id(sid: object) -> str:
        if not isinstance(sid, str):
            raise BadInputError(f"sequence id must be a str, got {sid!r}")
        return sid

    def attach(self, seq_id: str, lease: Lease) -> int:
        """Start an empty sequence with a leased prefix: its whole pages are shared, the partial page is
        copied into a fresh page of the sequence.  The lease stays held.  Returns the frontier."""
        with self.lock:
            seq = self._seq(seq_id)
            lease = self._own(lease)
            if seq.block:
                raise BadInputError(f"attach needs an empty sequence; {seq_id!r} has {seq.frontier} tokens")
            block = seq.block
            for pid in lease.pages:
                block.append(pid)
                self.pages.info[pid].seqs[seq_id] = seq
                self._refs_changed(pid)
            names = seq.view.names
            names["pages"] = len(block)
            names[B.FRONTIER] = len(block) * self.C
            part = lease.partial
            if part is not None and part.tokens:
                self._open(seq)
                pid = block[-1]
                info = self.pages.info[pid]
                for t in part.tokens:
                    self._fire("seal" if len(info.tokens) == self.C - 1 else "append", pid, seq)
                    info.tokens.append(t)
                self.store.write_prefix(info.gpu_slot, len(part.tokens), part.payload)
            return seq.frontier

    def free(self, seq_id: str) -> None:
        """End a sequence: its pages are released to the pool (admitted when the spec allows) and pages
        nothing else holds are dropped."""
        with self.lock:
            seq = self._seq(seq_id)
            del self.core.seqs[seq_id]
            for pid in seq.block:
                self.pages.info[pid].seqs.pop(seq_id, None)
                self._refs_changed(pid)
            if self.config.auto_admit:
                for pid in seq.block:
                    if pid not in self.pages.info:  # evicted to make room for an earlier block
                        continue
                    sealed = self.cols[B.TAIL][pid] in ("sealed", "released")
                    if sealed and self.cols[B.POOL][pid] != "pooled":
                        self._admit(pid)
            for pid in reversed(seq.block):
                self._collect(pid)

    def frontier(self, seq_id: str) -> int:
        """Tokens written to the sequence."""
        with self.lock:
            return self._seq(seq_id).frontier

    def sequence_pages(self, seq_id: str) -> tuple[int, ...]:
        """The sequence's page ids in block order."""
        with self.lock:
            return tuple(self._seq(seq_id).block)

    def cached_pages(self) -> tuple[int, ...]:
        """Pages in the reuse pool, least recently used first."""
        with self.lock:
            return tuple(self.pooled)

    def sequences(self) -> tuple[str, ...]:
        """Ids of the live sequences."""
        with self.lock:
            return tuple(self.core.seqs)

    # -- internal: writing --------------------------------------------------------------------------
    def _append_one(self, seq: Sequence, token: int) -> None:
        """``_append`` of one token (the decode step)."""
        block = seq.block
        info = self.pages.info[block[-1]] if block else None
        if info is None or len(info.tokens) == self.C:
            self._open(seq)
            info = self.pages.info[block[-1]]
        toks = info.tokens
        pid = block[-1]
        self._fire_own("seal" if len(toks) == self.C - 1 else "append", pid, seq)
        toks.append(token)
        self.store.write_tokens(info.gpu_slot, info.depth, len(toks) - 1, (token,))
        if len(toks) == self.C:
            self._touch(pid)
            self._sealed(seq, pid)

    def _append(self, seq: Sequence, tokens: Seq[int]) -> None:
        if len(tokens) == 1 and seq.frontier < self.config.max_sequence_tokens:
            self._append_one(seq, tokens[0])
            return
        if seq.frontier + len(tokens) > self.config.max_sequence_tokens:
            raise BadInputError(f"sequence {seq.sid!r}: {seq.frontier} + {len(tokens)} tokens exceeds "
                                f"max_sequence_tokens {self.config.max_sequence_tokens}")
        c = self.C
        fire = self._fire_own
        block = seq.block
        i, n = 0, len(tokens)
        while i < n:
            if not block or len(self.pages.info[block[-1]].tokens) == c:
                self._open(seq)
            pid = block[-1]
            info = self.pages.info[pid]
            toks = info.tokens
            start = len(toks)
            take = min(c - start, n - i)
            try:
                for j in range(i, i + take):
                    fire("seal" if len(toks) == c - 1 else "append", pid, seq)
                    toks.append(tokens[j])
            finally:
                if len(toks) > start:
                    self.store.write_tokens(info.gpu_slot, info.depth, start, tokens[i:i + len(toks) - start])
            i += take
            self._touch(pid)
            if len(toks) == c:
                self._sealed(seq, pid)

    def _open(self, seq: Sequence) -> None:
        block = seq.block
        parent = block[-1] if block else -1
        ph = self._parent_hash(block)
        pid = self.pages.alloc(len(block), parent, ph)
        info = self.pages.info[pid]
        try:
            slot = self._take_slot(pid, {pid})
        except BaseException:
            self.pages.release(pid)
            raise
        info.seqs[seq.sid] = seq
        self._place(pid, slot)
        block.append(pid)
        seq.view.names["pages"] = len(block)
        if parent >= 0:
            self.pages.info[parent].children += 1
        try:
            self._fire("open", pid, seq)
        except BaseException:
            block.pop()
            seq.view.names["pages"] = len(block)
            if parent >= 0:
                self.pages.info[parent].children -= 1
            self._unplace(pid)
            self.pages.release(pid)
            raise
        self.index.add_child(ph, pid, info.tokens)

    def _sealed(self, seq: Sequence, pid: int) -> None:
        info = self.pages.info[pid]
        info.hash = chain_hash(info.parent_hash, info.tokens)
        self.index.add_sealed(info.hash, pid)
        if self.config.auto_compress:
            self._maintain(pid)
        elif self.config.auto_admit:
            self._admit(pid)
        if self.config.auto_slide:
            self._auto_slide(seq)

    def _auto_slide(self, seq: Sequence) -> int:
        """Propose ``slide`` for the oldest live windows of the sequence until the spec refuses one."""
        block = seq.block
        slid = 0
        while seq.slide_next < len(block) - 1:
            pid = block[seq.slide_next]
            if self.cols[B.WINDOW][pid] == "live":
                if not self._try("slide", pid, seq, likely=False):
                    break
                slid += 1
            seq.slide_next += 1
        return slid

    # -- lookups and leases -------------------------------------------------------------------------
    def lookup(self, tokens: Seq[int], *, limit: int | None = None, owner: str | None = None) -> LookupResult:
        """Miss, NeedsRecovery(plan) or Ready(lease) for the longest cached prefix of ``tokens``
        (at most ``limit`` tokens).  Ready pins the whole pages of the hit."""
        toks = check_tokens(tokens)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise BadInputError(f"limit must be an int >= 0 or None, got {limit!r}")
        with self.lock:
            return self._lookup(toks, limit, owner)

    def probe(self, tokens: Seq[int], *, limit: int | None = None) -> Probe:
        """Nominal and effective hit of ``tokens`` and what blocks the nominal one; changes nothing
        (no pins, no metrics)."""
        toks = check_tokens(tokens)
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

    def kernel_lease(self, leases: Iterable[Lease]) -> Any:
        """A ``KernelLease`` (block table, generations, lengths as int32 tensors) for the read kernels."""
        from .kernel_lease import RuntimeKernelLease

        with self.lock:
            owned = [self._own(lease) for lease in leases]
            return RuntimeKernelLease.build(self, owned)

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
            seqs = [self._seq(s) for s in seq_ids]
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
