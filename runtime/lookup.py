"""Lookup: nominal hit, readiness, effective hit, and the answer (Miss / NeedsRecovery / Ready).

::

    lookup(tokens)
      1. nominal    hash-chain walk + partial-page match                     index.py
      2. readiness  the spec's ready[k] predicates on every page of the hit   (vector backend when
                    the hit is long, closures when it is short)
      3. effective  largest pos <= nominal with nothing needed unready       search.py
      4. answer     Miss | NeedsRecovery(plan) | Ready(lease: acquire on every whole page, one batch)

The module is a little longer than most: the loops generated from the spec (readiness, recovery
paths) and the plan and answers built from what they find read best together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import reduce
from operator import and_
from typing import Any, TypeVar

import numpy as np

from morphcache.spec.expr import Expr
from morphcache.spec.pycode import source

from .compiler import CompiledSpec
from .config import RuntimeConfig
from .errors import ConfigError
from .index import NominalHit, PrefixIndex
from .lease import PartialSnapshot
from .leases import LeaseBook
from .metrics import Metrics
from .pages import PageDirectory
from .plan import Assignment, LookupResult, Miss, NeedsRecovery, Probe, Ready, RecoveryPlan, choose_path
from .readers import ReaderTable
from .recurrent import NoRecurrentState, RecurrentPart
from .seam import PolicySeam
from .search import HitSearch, Masks
from .state import StateStore
from .tiers import Storage

VECTOR_FROM = 64  # hits of at least this many pages are checked by the vector backend (the generated loop
# costs about half a microsecond a page; the vector pass some 30 us, more in the trace replay, where the
# effective search over its array costs more than over the loop's list too: timed there)
_WORD = np.dtype("<u8")  # eight bytes read as one word, byte k its bits 8k .. 8k+7
_GATHER = np.uint64(sum(1 << 7 * (8 - k) for k in range(8)))  # byte k's low bit to bit 56 + k
_TOP = np.uint64(56)


_NAMED_PAGE = "n['p']"  # how generated source reads the page
_COLUMN = re.compile(r"(?<![\w\]'\"])a\['([A-Za-z_]\w*)'\]")  # how it reads a state variable's column
_NAMES = re.compile(r"(?<![\w.'\"])n\b")  # and any name
MaskFn = Callable[[Iterable[int], dict[str, Any], Mapping[str, Any]], list[int]]


def _hoisted(body: str) -> tuple[str, str]:
    """``body`` (generated source reading the page as ``p``) with each state variable's column read
    once before the loop instead of once a page, and the loop's head: the page stored in the names
    only when the body still reads them::

        a['tier'][p] == 0 and a['copied'][p]   ->   c_tier[p] == 0 and c_copied[p]
        prelude: c_tier = a['tier']; c_copied = a['copied']
    """
    columns = dict.fromkeys(_COLUMN.findall(body))
    body = _COLUMN.sub(lambda m: f"c_{m.group(1)}", body)
    prelude = "".join(f"    c_{name} = a[{name!r}]\n" for name in columns)
    head = "    for p in pids:\n" + ("        n['p'] = p\n" if _NAMES.search(body) else "")
    return body, prelude + head


def mask_function(ready: Sequence[Expr]) -> MaskFn:
    """``masks(pids, names, arrays)``: each page's readiness bits (bit k: ``ready[k]`` holds) in one
    generated loop, each predicate's generated source inlined (no call a predicate a page), each
    state variable's column read once (``_hoisted``)::

        def _masks(pids, n, a):
            out = []
            c_x = a['x']                  ...
            for p in pids:
                out.append((1 if <ready[0]> else 0) | (2 if <ready[1]> else 0) | ...)   n['p'] read as p
            return out
    """
    terms = " | ".join(f"({1 << k} if {source(e).replace(_NAMED_PAGE, 'p')} else 0)"
                       for k, e in enumerate(ready)) or "0"  # the page read from the loop's variable
    terms, head = _hoisted(terms)
    text = f"def _masks(pids, n, a):\n    out = []\n{head}        out.append({terms})\n    return out\n"
    scope: dict[str, Any] = {}
    exec(compile(text, "<readiness masks>", "exec"), scope)  # noqa: S102 - source generated from the spec's IR
    fn: MaskFn = scope["_masks"]
    return fn


ChooseFn = Callable[[Iterable[int], dict[str, Any], Mapping[str, Any]], list[str | None]]


def path_function(conditions: Mapping[str, Expr]) -> ChooseFn:
    """``choose(pids, names, arrays)``: each page's one recovery path whose condition holds (None when
    none or several do: ``choose_path`` then says which) in one generated loop, each condition's
    generated source inlined, each state variable's column read once (``_hoisted``)::

        def _choose(pids, n, a):
            out = []
            c_x = a['x']                  ...
            for p in pids:
                k, got = 0, None
                if <condition of path 1>:   n['p'] read as p
                    k, got = k + 1, 'path 1'
                ...
                out.append(got if k == 1 else None)
            return out
    """
    body = "".join(f"        if {source(cond).replace(_NAMED_PAGE, 'p')}:\n            k, got = k + 1, {path!r}\n"
                   for path, cond in conditions.items())
    body, head = _hoisted(body)
    text = (f"def _choose(pids, n, a):\n    out = []\n{head}        k, got = 0, None\n{body}"
            f"        out.append(got if k == 1 else None)\n    return out\n")
    scope: dict[str, Any] = {}
    exec(compile(text, "<recovery paths>", "exec"), scope)  # noqa: S102 - source generated from the IR
    fn: ChooseFn = scope["_choose"]
    return fn


def pack_bytes(words: np.ndarray) -> np.ndarray:
    """Bit k of each result is byte k of the word (each byte 0 or 1): one multiply and one shift.

    ::

        word      b7 b6 b5 b4 b3 b2 b1 b0        byte k = 0 or 1
        * G       G = sum 2**(7 * (8 - k)): byte k's bit (at 8k) lands at 8k + 7 * (8 - k) = 56 + k;
                  the other products fall past bit 63 or add up below bit 56 with no carry into it
                  (every pattern of eight 0/1 bytes is checked in the tests)
        >> 56     b7 .. b0 as bits 7 .. 0
    """
    return ((words * _GATHER) >> _TOP).view(np.int64)  # type: ignore[no-any-return]


class Lookups:
    """Answers lookups and probes; a Ready answer's lease comes from the lease book."""

    def __init__(self, cspec: CompiledSpec, store: StateStore, index: PrefixIndex, pages: PageDirectory,
                 readers: ReaderTable, leases: LeaseBook, storage: Storage, seam: PolicySeam, metrics: Metrics,
                 config: RuntimeConfig) -> None:
        self.cspec, self.store, self.index, self.pages, self.readers = cspec, store, index, pages, readers
        self.leases, self.storage, self.seam, self.metrics, self.config = leases, storage, seam, metrics, config
        lk = cspec.lookup
        for obj in lk.objects:
            if not lk.ready_local[obj]:
                raise ConfigError(f"lookup ready[{obj}] must read only the page's own state (x[p])")
        self.objects = lk.objects
        self.search = HitSearch(lk, cspec.spec.lookup, cspec.constants, config.page_size)
        self.C = config.page_size
        self._names: dict[str, Any] = dict(cspec.constants)
        self._weights = np.array([1 << k for k in range(len(self.objects))], dtype=np.int64)  # bit k of a mask
        self.states: RecurrentPart = NoRecurrentState()  # the recurrent part (parts.py wires it)
        self._fused = mask_function([lk.ir[obj][0] for obj in self.objects])  # the fast path's readiness and paths
        self._choose = {obj: path_function(lk.ir[obj][1]) for obj in self.objects}

    # -- readiness --------------------------------------------------------------------------------
    def masks(self, pids: Sequence[int] | np.ndarray, vector: bool = True) -> Any:
        """Readiness bits of each page (bit k: ``ready[objects[k]]`` holds): an int64 array from the
        vector backend, a list of ints from the closures."""
        lk = self.cspec.lookup
        if vector and self.config.fast and len(pids) >= VECTOR_FROM:
            names = dict(self._names, p=np.asarray(pids, dtype=np.int64))
            few = len(self.objects) <= 8  # one byte an object in one 64-bit word a page: packed by one multiply
            ready = (np.zeros if few else np.empty)((len(pids), 8 if few else len(self.objects)), dtype=np.uint8)
            for k, obj in enumerate(self.objects):
                ready[:, k] = lk.vready[obj](names, self.store.varrays)
            if few:
                return pack_bytes(ready.view(_WORD).reshape(len(pids)))
            return ready @ self._weights  # int64: the weights' type
        names, arrays = self._names, self.store.arrays
        if vector and self.config.fast:  # one generated loop; the closures below are the general path
            return self._fused(pids.tolist() if isinstance(pids, np.ndarray) else pids, names, arrays)
        ready_fns = [lk.ready[obj] for obj in self.objects]
        out = []
        for pid in pids.tolist() if isinstance(pids, np.ndarray) else pids:
            names["p"] = pid
            m = 0
            for k, fn in enumerate(ready_fns):
                if fn(names, arrays):
                    m |= 1 << k
            out.append(m)
        return out

    # -- answers ----------------------------------------------------------------------------------
    def probe(self, tokens: Sequence[int], limit: int | None) -> Probe:
        """Nominal and effective hit and what blocks the nominal one; changes nothing."""
        hit = self.index.nominal(tokens, limit)
        masks = self.masks(hit.page_ids())
        eff = self.search.effective(masks, hit.tokens)
        blocking = (frozenset(self.objects[k] for k in self.search.blocked(masks, hit.tokens))
                    if eff < hit.tokens else frozenset())
        return Probe(hit.tokens, eff, blocking)

    def oracle(self, tokens: Sequence[int], limit: int | None = None) -> tuple[int, int]:
        """``(nominal, effective)`` by brute force: closures on every page, every position tried."""
        hit = self.index.nominal(tokens, limit)
        return hit.tokens, self.search.brute(self.masks(hit.pages, vector=False), hit.tokens)

    def lookup(self, tokens: Sequence[int], limit: int | None, owner: str | None) -> LookupResult:
        """Miss, NeedsRecovery(plan) or Ready(lease) for the longest cached prefix of ``tokens``."""
        hit = self.index.nominal(tokens, limit)
        ids = hit.page_ids()
        masks = self.masks(ids)
        nominal = hit.tokens
        eff = self.search.effective(masks, nominal)
        plan = None
        if eff < nominal:
            try:
                plan = self.plan(hit, masks, eff, nominal, owner)
            except BaseException:  # (counted and touched all the same, as before the plan)
                self._counted(tokens, hit, masks, eff, ids, None)
                raise
        self._counted(tokens, hit, masks, eff, ids, plan)
        if nominal == 0:
            self.metrics.misses += 1
            return Miss()
        if plan is not None:
            gain = nominal - eff
            if plan.pages_to_prefetch or plan.pages_to_compress or plan.recompute_tokens < gain:
                self.metrics.needs_recovery += 1
                planned = self.metrics.planned_by_path
                for path, n in plan.routes.done.items():  # (a Counter's update by a mapping: a slower loop)
                    planned[path] += n
                return _frozen(NeedsRecovery, plan=plan)
        if eff == 0:
            self.metrics.misses += 1
            return Miss(nominal, 0)
        reader = self.readers.named(owner) if owner is not None else self.readers.anonymous()
        try:
            lease = self._lease(reader, hit, eff, ids)
        except BaseException:
            self.readers.retire_if_idle(reader)
            raise
        self.metrics.ready += 1
        return _frozen(Ready, lease=lease, nominal=nominal, state=self.states.path_of(hit, eff, owner))

    def _counted(self, tokens: Sequence[int], hit: NominalHit, masks: Any, eff: int, ids: Sequence[int] | np.ndarray,
                 plan: RecoveryPlan | None) -> None:
        """The lookup counted (its gap charged to the objects blocking the nominal position: those its
        plan found missing when no block past the chain can be needed there, else searched) and its
        pages touched at a new tick."""
        nominal = hit.tokens
        if eff == nominal:
            blocking: set[str] = set()
        elif plan is not None and self.search.within(len(masks), nominal):
            blocking = set(plan.missing)
        else:
            blocking = {self.objects[k] for k in self.search.blocked(masks, nominal)}
        self.metrics.lookup(len(tokens), nominal, eff, blocking)
        self.seam.tick()
        self.seam.accessed(ids)

    def _lease(self, reader: Any, hit: NominalHit, pos: int, ids: Sequence[int] | np.ndarray) -> Any:
        nfull = pos // self.C
        partial = None
        if pos % self.C:
            src = int(ids[nfull])
            rec = self.pages.get(src)
            n = pos % self.C
            partial = PartialSnapshot(nfull, src, tuple(rec.token_ids[:n]),
                                      self.storage.data.read_prefix(rec.gpu_slot, n))
        return self.leases.acquire(reader, hit.whole if nfull == len(hit.whole) else ids[:nfull], pos, partial)

    def plan(self, hit: NominalHit, masks: Masks, eff: int, target: int, owner: str | None = None
             ) -> RecoveryPlan:
        """A recovery plan to ``target``: one path per needed, unready (page, object)."""
        pages = hit.pages
        recovery = self.cspec.lookup.recovery
        fast = self.config.fast
        names, arrays = self._names, self.store.arrays  # (each generated loop sets ``p`` before it reads it)
        ready = masks.tolist() if isinstance(masks, np.ndarray) else masks
        common = reduce(and_, ready, self.search.full)  # the objects ready on every page (none unready there)
        chosen: list[tuple[int, str, int, str]] = []  # (block, object, page, path): sorted as assignments are
        in_place = 0
        missing: dict[str, int] = {}
        recompute: set[int] = set()  # blocks
        prefetch: set[int] = set()  # pages
        compress: set[int] = set()  # pages
        for k, (obj, needed) in enumerate(zip(self.objects, self.search.needed_blocks(len(pages), target),
                                              strict=True)):
            bit = 1 << k
            if common & bit:
                in_place += len(needed)
                continue
            unready = [p for p in needed if not ready[p] & bit]
            in_place += len(needed) - len(unready)
            if not unready:
                continue
            missing[obj] = len(unready)
            conditions = recovery[obj]
            pids = [pages[p] for p in unready]
            got = self._choose[obj](pids, names, arrays) if fast else [None] * len(pids)  # (the general path:
            for p, pid, path in zip(unready, pids, got, strict=True):                  # the closures)
                if path is None:  # DiversionError when not exactly one holds
                    names["p"] = pid
                    path = choose_path(obj, pid, p, conditions, names, arrays)
                chosen.append((p, obj, pid, path))
                if path == "prefetch":
                    prefetch.add(pid)
                elif path == "recompute":
                    recompute.add(p)
                elif path == "compress":
                    compress.add(pid)
        chosen.sort()  # by block, then object: (block, object) is unique
        owned = self.states.objects  # recovered by the recurrent part, priced like the others
        assignments = [_assignment(pid, p, obj, path) for p, obj, pid, path in chosen]
        page_level = tuple(a for a in assignments if a.obj not in owned) if owned else tuple(assignments)
        state_level = tuple(a for a in assignments if a.obj in owned) if owned else ()
        c = self.C
        rtokens = sum(min((p + 1) * c, target) - p * c for p in recompute)
        page_bytes = self.config.page_bytes or self.storage.data.page_bytes
        return _frozen(RecoveryPlan, nominal=hit.tokens, effective=eff, target=target, pages=pages,
                       assignments=page_level, in_place=in_place, recompute_tokens=rtokens,
                       bytes_to_move=len(prefetch) * page_bytes, pages_to_prefetch=len(prefetch),
                       pages_to_compress=len(compress), missing=missing, state=self.states.path(pages, target, owner),
                       state_assignments=state_level)


_NEW = object.__new__
T = TypeVar("T")


def _frozen(cls: type[T], **fields: Any) -> T:
    """``cls(**fields)`` for a frozen dataclass with no ``__post_init__``: the same value (equal,
    hashing alike), its fields set in one update of its ``__dict__`` instead of the frozen
    ``__init__``'s guarded write per field (a lookup's answers and a plan's assignments)."""
    out: T = _NEW(cls)
    out.__dict__.update(fields)
    return out


def _assignment(page: int, block: int, obj: str, path: str) -> Assignment:
    """``Assignment(page, block, obj, path)`` as ``_frozen`` makes it (a plan makes one per unready page
    and object)."""
    out: Assignment = _NEW(Assignment)
    out.__dict__.update(page=page, block=block, obj=obj, path=path)
    return out
