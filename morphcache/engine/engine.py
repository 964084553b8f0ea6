"""Engine: the reference model served through the runtime and the cache kernels.

::

    Engine
     ├── model        HybridModel (seeded or trained weights; its position-wise blocks run in torch)
     ├── pools        PagePools: raw / compressed / indexer pools of every attention layer + gen_table
     ├── states       StatePools: every linear layer's working states and checkpoint area
     ├── store        TensorPageStore: the runtime's data plane over the pools (kernels' page copies)
     ├── manager      CacheManager(spec, RuntimeConfig, store): sequences, lookup, leases, tiers
     ├── policy       the eviction policy (EngineConfig.policy) proposing the runtime's victims
     ├── ops          the kernel launchers the forward calls (guarded, reference, or unguarded)
     ├── checkpoints  where the nearest earlier recurrent-state checkpoint is found and new ones saved
     │                (the runtime's, checkpoints.py; none without recurrent state in the spec)
     └── hash_only    the unsafe mode's hash -> slot table

``serve(tokens)`` opens a Session (lookup, recovery, lease, linear-layer state at the hit boundary),
prefills the rest of the prompt, decodes ``decode`` greedy tokens, closes the session and returns
the logits of every computed position.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import torch

from morphcache.engine.approximate import Divergence, divergence
from morphcache.engine.checkpoints import RuntimeCheckpoints
from morphcache.engine.config import EngineConfig, model_name
from morphcache.engine.hashonly import HashOnlyIndex
from morphcache.engine.ops import AttentionOps, layout_alignment, make_ops
from morphcache.engine.pools import PagePools
from morphcache.engine.rebuild import CheckpointSource, NoCheckpoints
from morphcache.engine.report import ServeResult
from morphcache.engine.session import EngineCapacityError, Session, Spans
from morphcache.engine.states import StatePools
from morphcache.engine.store import TensorPageStore
from morphcache.kernels import StaleReadError
from morphcache.model import HybridModel, golden_logits, load_trained
from morphcache.runtime import GDN_SPEC, SHIPPED_SPEC, CacheManager, EvictionPolicy, StaleLeaseError, make_policy

RETRIES = 1


class Engine:
    """A cached-inference engine over one CacheManager (see the module docstring).

    ``spec``: the spec the runtime runs (default ``default_spec``: the shipped design, with recurrent
    state for a model with linear layers).  With recurrent state the linear layers' checkpoints are the
    runtime's (``checkpoints.py``); without, every hit recomputes them from the zero state.  The engine serves one
    request at a time; ``close()`` (or the context manager) stops the runtime's copy workers.
    """

    def __init__(self, config: EngineConfig | None = None, model: HybridModel | None = None,
                 spec: Any = None) -> None:
        self.config = config = config or EngineConfig()
        self.model = model if model is not None else _model(config)
        if self.model.config != config.model:
            raise ValueError("the model's config differs from EngineConfig.model")
        self.page_size = config.model.page_size
        self.pools = PagePools(config.model, config.gpu_pages, config.device)
        self.states = StatePools(config.model, config.state_slots, config.gpu_pages, config.device)
        self.store = TensorPageStore(self.pools, self.model)
        self.policy: EvictionPolicy = make_policy(config.policy)
        runtime_config = dataclasses.replace(config.runtime_config(), policy=self.policy)
        self.manager = CacheManager(spec if spec is not None else default_spec(config), runtime_config,
                                    store=self.store)
        self.checkpoints: CheckpointSource = (
            RuntimeCheckpoints(self.manager, self.states, self.page_size)
            if self.manager.has_recurrent_state and not config.unsafe else NoCheckpoints())
        # one lock for both planes: the prefetch worker takes the manager's lock, then writes the pools;
        # the forward writes the pools and re-validates leases through the manager
        self.store.lock = self.manager.lock
        self.ops: AttentionOps = make_ops(config.ops, guarded=not config.unsafe,
                                          alignment=layout_alignment(self.manager.spec))
        self.hash_only = HashOnlyIndex(self.page_size)
        self._ids = itertools.count()

    def session(self, request_id: str | None = None, *, types: Spans = None, session: str | None = None,
                task: str | None = None) -> Session:
        """A new, unopened session (its sequence id is unique within this engine); ``types``,
        ``session`` and ``task`` tag the pages it writes (see ``serve``)."""
        n = next(self._ids)
        rid = request_id if request_id is not None else f"req{n}"
        return Session(self, f"{rid}#{n}", rid, types=types, session=session, task=task)

    def serve(self, tokens: Sequence[int], *, decode: int = 0, request_id: str | None = None,
              tail_replay: float | None = None, types: Spans = None, session: str | None = None,
              task: str | None = None) -> ServeResult:
        """Serve one request: reuse the cache for ``tokens``, prefill the rest, decode ``decode``
        greedy tokens.  Returns the logits of positions ``start .. len(prompt) + decode - 1``.

        ``types``: ``(start, end, type_name)`` spans over the prompt, ``session`` / ``task``: the
        request's ids; the runtime's pages carry them (``PageMeta``) for the eviction policy, and the
        decoded tokens of a typed request are of type ``response``.  They change no logit.

        ``tail_replay`` (a fraction of the hit in [0, 1]): the request accepts an approximate
        linear-layer state, rebuilt by replaying only the last ``round(tail_replay x hit)`` tokens
        of the hit (rebuild.py); its report then says ``exact=False`` and the pages it wrote are
        withdrawn from the cache.  Without it every path is exact.

        State: the runtime's sequences, pages, tiers and metrics; the pools.  The request's sequence
        is freed before returning (its complete pages stay cached).  A read refused as stale (a page
        generation moved under the lease) abandons the session and serves the request again from a
        new lookup, once.
        """
        limit = self.config.context_limit
        if limit is not None and len(tokens) + decode > limit:
            raise EngineCapacityError(f"request {request_id!r}: {len(tokens)} prompt + {decode} decoded tokens "
                                      f"exceed the context limit of {limit} tokens (EngineConfig.max_context)")
        for attempt in range(1 + RETRIES):
            live = self.session(request_id, types=types, session=session, task=task)
            try:
                logits = live.open(list(tokens), tail_replay=tail_replay)
                if decode:
                    _, more = live.decode(decode, logits)
                    logits = torch.cat([logits, more])
            except (StaleReadError, StaleLeaseError):
                if attempt == RETRIES:
                    raise
                continue
            finally:
                live.close()
            return ServeResult(tuple(live.tokens), live.start, logits, live.report(), live.pages)
        raise AssertionError("unreachable")

    def golden_diff(self, result: ServeResult) -> float:
        """Largest |cached - golden| logit over the positions the request computed."""
        return self.divergence(result).max_abs_diff

    def divergence(self, result: ServeResult) -> Divergence:
        """The request's logits against the golden forward (full recomputation) over the positions it
        computed: largest difference and top-1 agreement."""
        if result.logits.shape[0] == 0:
            return divergence(result.logits, result.logits)
        gold = golden_logits(self.model, list(result.tokens))[result.start:]
        return divergence(result.logits, gold)

    def check_integrity(self) -> None:
        """The runtime's invariants on its live state (IntegrityError on a disagreement)."""
        self.manager.check_integrity()

    def close(self) -> None:
        """Wait for copies in flight and stop the runtime's workers."""
        self.manager.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_spec(config: EngineConfig) -> Any:
    """The spec a model is served with: ``spec/gdn_hybrid.yaml`` (recurrent state as runtime objects)
    for a model with linear layers, the shipped design otherwise."""
    return GDN_SPEC if config.model.linear_layers else SHIPPED_SPEC


def _model(config: EngineConfig) -> HybridModel:
    """The model an EngineConfig names: the shipped trained weights, or seeded weights."""
    if config.weights == "trained":
        name = model_name(config.model)
        assert name is not None  # EngineConfig checked it
        return load_trained(name, device=torch.device(config.device))
    return HybridModel(config.model, seed=config.seed).to(config.device)
