"""Admission of many sealed pages to a full reuse pool in one go, with exactly the outcome of admitting
them one at a time.

One at a time (``Morphology.admit``), the pool full::

    for p_i:  propose admit p_i (refused: full);  choose pool -> v_i;
              one transaction: evict v_i, admit p_i;  collect v_i (keep p_i)

In one go, when nothing can tell the two apart::

    propose admit p_1 (refused);  choose pool -> v_1..v_k
    one transaction: evict v_*, admit p_* (batches);  the pool's bookkeeping and the policy told in
    the one-at-a-time order (v_1, p_1, v_2, p_2 ...);  collect v_i (keep p_i and v_i+1..v_k), in order

Why nothing tells them apart (each condition checked here, else the caller goes one at a time):

- the victims: the policy's proposals have no side effect and each of the first k is one ``choose``
  would accept (no refusal to count: the spec's guard of each is checked by the batch's ``evict``,
  refused as a whole where ``choose`` would refuse one); one at a time, a page admitted goes to the
  back of the pool, so the first k proposals are the k victims one at a time would choose;
- the events (checked on the compiled spec): ``evict`` and ``admit`` read only their own page's
  state, except conjuncts that read only page aggregates of the pool variable, and write only their
  own page; ``forget`` (the collection) writes only its own page, never the pool variable.  An
  aggregate of the pool variable counts the pooled pages (its body is neutral on a page out of the
  pool), and one at a time every ``evict`` sees the pool full and every ``admit`` one page short of
  it, as the batch's first ``evict`` and last ``admit`` do: if the batch passes, each firing one at a
  time passes, and writes the same; if it is refused, nothing is kept (refusal counts included) and
  the caller goes one at a time.  The first page's proposal refused with the pool full, so is every
  later page's (their own conjuncts pass, as the batch shows: the count refuses);
- the collection: a victim's collection walks up its ancestors until one is held; one at a time the
  later victims are still pooled and the pages still to admit are in the writer's block table
  (checked), so both stop there: a later victim is kept; the forgets happen in the same order, on
  the same pages, each reading only its own page.

A write's sealed pages meeting a pool the count keeps full are not proposed one by one first
(``Morphology.maintain_many``): a conjunct of ``admit`` that reads only the pool's counts reads the
same for every page, so it is evaluated once (``count_refuser``); false, every proposal would be
refused (counting nothing), and the pages come here as they would after their refusals.

The policy's touches come in the same order with the same clock (forgetting a page touches nothing),
so its queues are the same once a decision reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from morphcache.spec.expr import Index, Name, Reduce, walk

from . import pipeline
from .binding import BLOCK, POOL
from .compiler import CompiledEvent, CompiledSpec, Conjunct
from .errors import GuardRefused
from .holders import NOBODY

if TYPE_CHECKING:
    from .morphology import Morphology
    from .pipeline import Pipeline

BATCH_FROM = 2  # fewer pages than this: one at a time (on the Mooncake replay one page alone costs ~64 us, in
# one go ~72 us: the batch's checks and its collection's plan; two pages ~98 us alone, ~82 us in one go)
FIRE_FROM = 64  # evictions and admissions of a batch this long or longer fire as two vector batches, shorter
# ones each alone in the batch's transaction (on the Mooncake replay a vector ``evict`` or ``admit`` costs
# ~45-105 us from 16 to 63 pages, a firing alone ~1.5-2 us: about even at 64 pages; ``fire_from``)
EVENTS = ("evict", "admit", "forget")
_SHIPPED_VECTOR_FROM = pipeline.VECTOR_FROM


def _local(expr: object) -> bool:
    """Whether ``expr`` reads only the firing page's state (``x[p]``) and constants."""
    for node in walk(expr):  # type: ignore[arg-type]
        if isinstance(node, Reduce) or (isinstance(node, Name) and node.name != "p"):
            return False
        if isinstance(node, Index) and not (len(node.args) == 1 and isinstance(node.args[0], Name)):
            return False
    return True


def _writes_own_page(ev: CompiledEvent) -> bool:
    return ev.scope == "page" and not ev.params and not ev.observes and \
        all(eff.index == "p" and eff.star is None and _local(eff.expr) for eff in ev.effects)


def _count_only(cspec: CompiledSpec, conj: Conjunct) -> bool:
    """Whether ``conj`` reads only page aggregates of the pool variable (counts) and constants."""
    counts = {name for name, agg in cspec.aggregates.items() if agg.kind == "sum" and agg.reads == {POOL}}
    nodes = list(walk(conj.expr))
    return all(not isinstance(n, (Index, Reduce)) for n in nodes) and \
        {n.name for n in nodes if isinstance(n, Name)} <= counts


def exact_in_one_go(cspec: CompiledSpec) -> bool:
    """Whether the spec's ``evict``, ``admit`` and ``forget`` have the shape the module doc needs."""
    events = cspec.events
    if not all(name in events for name in EVENTS):
        return False
    evict, admit, forget = (events[name] for name in EVENTS)
    if evict.owner != POOL or admit.owner != POOL or POOL in forget.writes:
        return False
    if not all(_writes_own_page(ev) for ev in (evict, admit, forget)):
        return False
    return all(_count_only(cspec, conj) or _local(conj.expr) for ev in (evict, admit) for conj in ev.conjuncts)


def count_checks(cspec: CompiledSpec) -> tuple[Conjunct, ...]:
    """The conjuncts of ``admit``'s guard that read only the pool's counts (none unless the spec is one
    ``exact_in_one_go`` accepts)."""
    if not exact_in_one_go(cspec):
        return ()
    return tuple(conj for conj in cspec.events["admit"].conjuncts if _count_only(cspec, conj))


def count_refuser(pipe: Pipeline, checks: tuple[Conjunct, ...]) -> Callable[[int], bool]:
    """``refuses(pid)``: whether one of ``admit``'s conjuncts that read only the pool's counts
    (``checks``, ``count_checks``) is false, evaluated once, for page ``pid``: they read the same for
    every page, so then, while the pool stays as it is, every proposal of ``admit`` is refused (none
    counted: nothing tells it from proposing each page).  Always False without such conjuncts.  (The
    pipeline's names and the store's arrays are the same objects for its life.)"""
    if not checks:
        return _never
    ev, bind, arrays = pipe.cspec.events["admit"], pipe.names.bind, pipe.store.arrays
    fns = tuple(conj.fn for conj in checks)

    def refuses(pid: int) -> bool:
        n = bind(ev, None, pid, None, None)
        for fn in fns:
            if not fn(n, arrays):
                return True
        return False
    return refuses


def _never(pid: int) -> bool:
    return False


def fire_from() -> int:
    """The least batch that ``admit_batch`` fires as one vector batch of ``evict`` and one of ``admit``:
    ``FIRE_FROM``, or a lowered ``pipeline.VECTOR_FROM`` (which sends every batch that long to the vector
    backend)."""
    least = pipeline.VECTOR_FROM
    return least if least < _SHIPPED_VECTOR_FROM else FIRE_FROM


def admit_batch(morph: Morphology, pids: list[int], full: bool = False) -> int:
    """Admit ``pids`` (sealed, distinct, not pooled; in this order) to the full pool in one go, each
    evicting the policy's victim; returns how many of the first pages were dealt with (all of them,
    or 1 when the first was admitted with no victim, or 0 with nothing changed): the caller admits
    the rest one at a time.  ``full``: the pool's count refuses every page (``count_refuser``), so
    the first page's proposal is not made again."""
    k = len(pids)
    if k < BATCH_FROM or not morph.batchable or len(morph.pooled) < morph.config.capacity:
        return 0
    pipe, seam, store = morph.pipe, morph.seam, morph.store
    pooled = morph.pooled
    holders = morph.block_holders
    protect = set(pids)
    if len(protect) != k or not pooled.keys().isdisjoint(protect) or \
            (NOBODY in map(holders.slots.__getitem__, pids) if holders is not None  # (``holders.get`` None)
             else not all(store.readers_at((BLOCK,), pid) for pid in pids)):
        return 0
    if not full and pipe.propose("admit", None, pids[0]):
        return 1
    victims = seam.choose_many("pool", ("evict",), protect, k, guarded=False)  # the batch's guard decides
    if victims is None:
        return 0
    morph.quiet = True
    try:
        with pipe.tentative(("evict", "admit")):
            if k < fire_from():  # each alone, in this transaction
                for name, ids in (("evict", victims), ("admit", pids)):
                    fire = pipe.firer(name)
                    for pid in ids:
                        fire(None, pid, None, None)
            else:
                pipe.fire_batch("evict", None, np.asarray(victims, dtype=np.int64), distinct=True)
                pipe.fire_batch("admit", None, np.asarray(pids, dtype=np.int64), distinct=True)
    except GuardRefused:  # one at a time meets the refusal and counts it there
        return 0
    finally:
        morph.quiet = False
    morph.note_moved(victims, pids)  # each victim was pooled and each page not (checked above)
    seam.accepted("pool", k)
    morph.collector.collect_in_turn(victims, pids)  # one at a time, the victims not yet evicted are pooled
    return k
