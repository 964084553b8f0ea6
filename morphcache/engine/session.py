"""Session: one request's sequence, from the lookup to ``free``.

::

    open (guarded)                              open (unsafe, hash-only)
      register(seq)                               hit = hash table walk, trusted as readable
      resolve_hit -> lease at `reused`            register(seq, prompt[:hit])  (fresh pages)
      attach(seq, lease)  shared pages +          copy the hit slots' contents into them
                          copy-on-write of the    (whatever those slots hold now)
                          partial page
      acquire(seq) pins the whole pages           acquire(seq)
      claim a working state slot; rebuild the     claim a working state slot; trust what it holds
      linear layers' state at `reused`            (rebuild.py: "trusted")
      (rebuild.py: recompute, or tail-replay
      if the request opted in)
    extend(tokens)                              (same, with the guard compiled out)
      append(seq, tokens)   runtime opens/seals pages, slides windows
      forward_chunk         store, compress, read (kernels, under a SequenceLease); linear layers
                            advance the working state (gdn_prefill / gdn_decode)
      compress(sealed pages) then acquire(seq) again: every whole page is pinned before the next append
    types, session, task (optional) tag the pages: register(seq, session, task), every append carries the
    prompt's type spans clipped to the tokens appended; decoded tokens of a typed request are "response"
    close
      write back recomputed pages (repair.py; exact requests only), release the window layers' KV of
      pages that slid out, release the lease, withdraw an approximate request's pages
      (approximate.py), free(seq), give the state slot back
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from morphcache.engine.approximate import withdraw
from morphcache.engine.forward import forward_chunk
from morphcache.engine.lease import FixedLease, SequenceLease
from morphcache.engine.mixers import RecurrentSlot
from morphcache.engine.rebuild import StatePlan, choose_path, plan_state, replay_budget, run_plan
from morphcache.engine.recovery import HitOutcome, resolve_hit
from morphcache.engine.repair import write_back
from morphcache.engine.report import RequestReport
from morphcache.kernels import KernelLease
from morphcache.runtime import CapacityError, GuardRefused, Lease, MorphcacheError, StaleLeaseError
from morphcache.workloads.typed import clip_spans

if TYPE_CHECKING:
    from morphcache.engine.engine import Engine

Spans = Sequence[tuple[int, int, str]] | None
RESPONSE = ((0, 1, "response"),)  # the type span of one decoded token


def clipped(spans: Spans, start: int, end: int) -> tuple[tuple[int, int, str], ...] | None:
    """The request's type spans over ``prompt[start:end]``, shifted to start at 0 (``clip_spans``);
    None for an untyped request."""
    return None if spans is None else clip_spans(spans, start, end)


class EngineCapacityError(RuntimeError):
    """The GPU pool cannot hold the request: the runtime had to move a page the forward was about to
    write.  The request was abandoned and the unwritten pages dropped (recompute is their way back)."""


class SessionFailedError(RuntimeError):
    """The session's sequence is in an unknown state after a refused read or a refused append; it can
    only be closed (the engine retries the request from a new lookup)."""


class Session:
    """A live sequence of ``engine`` serving one request; ``open`` before ``extend``, then ``close``."""

    def __init__(self, engine: Engine, seq_id: str, request_id: str, *, types: Spans = None,
                 session: str | None = None, task: str | None = None) -> None:
        self.engine = engine
        self.types = None if types is None else tuple(types)
        self.session = session
        self.task = task
        self.manager = engine.manager
        self.seq_id = seq_id
        self.request_id = request_id
        self.lease: Lease | None = None
        self.tokens: list[int] = []
        self.prompt_tokens = 0
        self.start = 0
        self.outcome: HitOutcome | None = None
        self.t0 = time.perf_counter()
        self.closed = False
        self.pages: tuple[int, ...] = ()
        self.rebuilt = 0
        self.failed: str | None = None
        self.recurrent: RecurrentSlot | None = None
        self.state_plan: StatePlan | None = None
        self.state_token_layers = 0
        self.withdrawn = 0

    # -- open -------------------------------------------------------------------------------------
    def open(self, prompt: Sequence[int], tail_replay: float | None = None) -> Tensor:
        """Reuse what the cache can give for ``prompt``, rebuild the linear layers' state at the hit
        boundary, prefill the rest; logits of positions ``start .. len(prompt) - 1``.

        ``tail_replay``: the request opts in to an approximate state with a budget of
        ``round(tail_replay x (len(prompt) - 1))`` tokens (rebuild.py ``replay_budget``); a tail replay
        of ``min(hit, budget)`` tokens is then the runtime's ``replay_tail``, reported as approximate.
        """
        if not prompt:
            raise ValueError("a request needs at least one prompt token")
        engine = self.engine
        path = choose_path(unsafe=engine.config.unsafe, tail_replay=tail_replay, checkpoints=engine.checkpoints)
        self.prompt_tokens = len(prompt)
        if engine.config.unsafe:
            self._open_unsafe(prompt)
        else:
            self._open_guarded(prompt, replay_budget(tail_replay, len(prompt)) if tail_replay is not None else None)
        self.start = self.manager.frontier(self.seq_id)
        self.tokens = list(prompt[: self.start])
        self.recurrent = RecurrentSlot(engine.states, engine.states.claim(self.seq_id))
        self.state_plan = plan = plan_state(path, self, self.start, len(engine.model.config.linear_layers))
        try:
            self.state_token_layers = run_plan(self, plan, self.recurrent, self._kernel_lease())
        except BaseException as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            raise
        return self.extend(prompt[self.start:], types=clipped(self.types, self.start, len(prompt)))

    def _open_guarded(self, prompt: Sequence[int], budget: int | None) -> None:
        m = self.manager
        if budget is not None and m.has_recurrent_state:  # spec opt_in(n = budget)
            m.register(self.seq_id, approximate=True, replay_budget=budget, session=self.session, task=self.task)
        else:
            m.register(self.seq_id, session=self.session, task=self.task)
        self.outcome = resolve_hit(m, prompt, len(prompt) - 1, self.seq_id)
        hit = self.outcome.lease
        if hit is not None:
            try:
                m.attach(self.seq_id, hit, types=clipped(self.types, 0, hit.tokens))
                self.lease = m.acquire(self.seq_id)
            finally:
                m.release(hit)

    def _open_unsafe(self, prompt: Sequence[int]) -> None:
        m, c = self.manager, self.engine.page_size
        hit = self.engine.hash_only.lookup(prompt, len(prompt) - 1)
        n = hit.tokens(c)
        m.register(self.seq_id, list(prompt[:n]), types=clipped(self.types, 0, n), session=self.session,
                   task=self.task)
        src = list(hit.slots) + ([hit.partial_slot] if hit.partial_slot is not None else [])
        own: list[int] = m.page_values(m.sequence_pages(self.seq_id), ("gpu_slot",))["gpu_slot"]
        if any(s < 0 for s in own):
            self._abandon("a page of the hit prefix left the GPU while it was being allocated")
        self.engine.store.copy_pages(src, own[: len(src)])
        self._compress_sealed()
        self.lease = m.acquire(self.seq_id)
        self.outcome = HitOutcome(None, n, n, n, {}, {}, 0, 0, 0, 0)

    # -- extend -----------------------------------------------------------------------------------
    def extend(self, tokens: Sequence[int], types: Spans = None) -> Tensor:
        """Append ``tokens`` (``types``: their type spans) and run them through the cached forward;
        their logits [n, vocab].

        State: the runtime opens/seals pages for them (and may move other pages to make room); the
        forward stores their KV and compresses completed pages; the sealed pages are compressed in
        the runtime and every whole page is pinned by the session's lease afterwards.
        """
        engine, m = self.engine, self.manager
        if self.failed is not None:
            raise SessionFailedError(f"session {self.seq_id!r} failed earlier: {self.failed}")
        if not tokens:
            return torch.zeros(0, engine.model.config.vocab_size, device=engine.pools.device)
        rows: list[Tensor] = []
        at = 0
        for n in engine.checkpoints.pieces(m.frontier(self.seq_id), len(tokens)):  # cut at page ends
            rows.append(self._write(tokens[at:at + n], clipped(types, at, at + n)))
            at += n
        logits = torch.cat(rows) if len(rows) > 1 else rows[0]
        self._compress_sealed()
        fresh = m.acquire(self.seq_id)
        if self.lease is not None:
            m.release(self.lease)
        self.lease = fresh
        return logits

    def _write(self, tokens: Sequence[int], types: Spans) -> Tensor:
        """Append ``tokens`` (``types``: their type spans) and run the writing pass over them; a state
        reached at a page end is handed to the checkpoint source (rebuild.py)."""
        engine, m = self.engine, self.manager
        start = m.frontier(self.seq_id)
        try:
            m.append(self.seq_id, list(tokens), types=types)
        except CapacityError as exc:  # no GPU slot without moving one of this request's own pages
            self._abandon(str(exc))
        try:
            lease = self._kernel_lease()
            logits = forward_chunk(engine.model, engine.store, engine.ops, lease, lease.slots, start, tokens,
                                   self.recurrent)
            self.tokens.extend(tokens)
            if self.recurrent is not None:
                engine.checkpoints.reached(self, self.recurrent)
        except BaseException as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            raise
        return logits

    def decode(self, steps: int, last_logits: Tensor) -> tuple[list[int], Tensor]:
        """Greedy decode: ``steps`` tokens, one forward each; returns them and their logits."""
        out: list[int] = []
        rows: list[Tensor] = []
        logits = last_logits
        for _ in range(steps):
            token = int(torch.argmax(logits[-1]))
            logits = self.extend([token], types=None if self.types is None else RESPONSE)
            out.append(token)
            rows.append(logits)
        cat = torch.cat(rows) if rows else last_logits[:0]
        return out, cat

    def _kernel_lease(self) -> SequenceLease | FixedLease:
        engine, m = self.engine, self.manager
        lease = SequenceLease(m, self.seq_id, self.lease, engine.pools.device)
        if any(s < 0 for s in lease.slots):
            self._abandon("a page of the sequence left the GPU before its KV was written")
        if engine.config.unsafe:
            return FixedLease(lease.slots, lease.lease_generations[0].tolist(), int(lease.seq_lens[0]),
                              engine.pools.device)
        try:
            lease.check_live()
        except StaleLeaseError as exc:
            self._abandon(str(exc))
        return lease

    def _compress_sealed(self) -> None:
        """Propose ``compress`` for the sequence's sealed pages not compressed yet (their KV is in the
        pools; the store skips the kernel when the forward already compressed them)."""
        m = self.manager
        pages = m.sequence_pages(self.seq_id)
        now = m.page_values(pages, ("tail", "compressed", "tier"))
        for pid, tail, compressed, tier in zip(pages, now["tail"], now["compressed"], now["tier"], strict=True):
            if tail == "sealed" and compressed == "none" and tier == "gpu":
                m.compress(pid)

    # -- close ------------------------------------------------------------------------------------
    def report(self) -> RequestReport:
        """The request's counters so far."""
        o, plan = self.outcome, self.state_plan
        assert o is not None
        return RequestReport(
            request_id=self.request_id,
            prompt_tokens=self.prompt_tokens,
            decoded=len(self.tokens) - self.prompt_tokens,
            nominal=o.nominal,
            effective=o.effective,
            reused=self.start,
            computed=len(self.tokens) - self.start,
            gap_by_object=dict(o.gap_by_object),
            recoveries=dict(o.paths),
            prefetched_bytes=o.prefetched_bytes,
            prefetched_pages=o.prefetched_pages,
            corrupt_pages=o.corrupt_pages,
            rebuilt_pages=self.rebuilt,
            wall_s=time.perf_counter() - self.t0,
            state_path=plan.path if plan is not None else "none",
            exact=plan.exact if plan is not None else True,
            linear_tokens=plan.replayed if plan is not None else 0,
            checkpoint_tokens=plan.from_checkpoint if plan is not None else 0,
            linear_token_layers=self.state_token_layers,
            replay_budget=plan.budget if plan is not None else None,
            withdrawn_pages=self.withdrawn,
        )

    @property
    def exact(self) -> bool:
        """False once the request runs on an approximate linear-layer state (rebuild.py)."""
        return self.state_plan is None or self.state_plan.exact

    def close(self) -> None:
        """Write recomputed pages back into the cached pages the plan named (repair.py; exact requests
        only), release the window KV of pages that slid out, remember the pages (unsafe mode), release
        the lease, withdraw the pages an approximate request wrote (approximate.py), free the sequence
        (its sealed, complete pages join the reuse pool) and give its state slot back."""
        if self.closed:
            return
        self.closed = True
        engine, m = self.engine, self.manager
        try:
            pages = self.pages = m.sequence_pages(self.seq_id)
            plan = self.outcome.recompute_plan if self.outcome is not None else None
            if plan is not None and not engine.config.unsafe and self.failed is None and self.exact:
                self.rebuilt = write_back(m, engine.store, plan, pages, self.tokens)
            if engine.config.release_windows:
                now = m.page_values(pages, ("window", "tier", "gpu_slot"))
                for window, tier, slot in zip(now["window"], now["tier"], now["gpu_slot"], strict=True):
                    if window == "expired" and tier == "gpu":
                        engine.store.release_window(slot)
            if engine.config.unsafe and self.failed is None:
                states = [m.page_state(pid) for pid in pages]
                engine.hash_only.record([(st["tokens"], int(st["gpu_slot"])) for st in states])
        finally:
            if self.lease is not None:
                m.release(self.lease)
                self.lease = None
            try:
                if not self.exact:
                    self.withdrawn = withdraw(m, m.sequence_pages(self.seq_id), self.start // engine.page_size)
            finally:
                m.free(self.seq_id)
                if self.recurrent is not None:
                    engine.states.give_back(self.recurrent.slot)

    def _abandon(self, why: str) -> None:
        """Drop the sequence's pages that left the GPU before their KV was written, free it, raise."""
        m = self.manager
        self.failed = why
        for pid in m.sequence_pages(self.seq_id):
            st = m.page_state(pid)
            if st["tier"] != "gpu" and st["tier"] != "dropped" and st["compressed"] == "none":
                try:
                    m.drop(pid)
                except (GuardRefused, MorphcacheError):
                    pass
        self.close()
        raise EngineCapacityError(f"request {self.request_id!r}: {why} (GPU pool too small for it)")


def kernel_lease_of(session: Session) -> KernelLease:
    """The kernel lease the session's next forward would read under (for tests and tools)."""
    return session._kernel_lease()
