"""Room for several GPU pages in one go: the victims chosen as a batch, their moves fired as vector
batches, with exactly the outcome of making the room one victim at a time.

One victim at a time (``TierMover.reclaim_gpu``), with a full host tier::

    for v_i:  choose gpu -> v_i;  choose host -> h_i;  write h_i's disk file;  spill h_i;
              offload v_i, offload_done v_i;  h_i's host copy freed, v_i's slot freed

In one go, when nothing can tell the two apart::

    choose gpu -> v_1..v_k;  choose host -> h_1..h_m   (m = k - free host pages)
    write the m disk files;  one transaction: spill h_*, offload v_*, offload_done v_* (vector batches;
                             fewer than SINGLE_BELOW victims: each event fired alone, in the same order)
    then: the h_* host copies freed and the v_* ones kept at once, v_i's slot freed in turn, and the
          policy told of every move at once, in the one-at-a-time order (h_1, v_1, h_2, v_2 ...)

Nothing tells them apart when every event involved reads and writes only its own page (checked on
the compiled spec, so the batch's order is as good as the interleaved one), the policy's proposals
have no side effect and each of the first k (m) proposals is one ``choose`` would accept (no
refusal to count), every victim can be offloaded (a spill victim spilled), and the disk has room for
every spill (no disk victim is dropped, so nothing is forgotten meanwhile).  Otherwise the caller
makes the room one victim at a time.  A failed disk write deletes the files written and leaves the
room to the one-at-a-time path, which meets the same failure.

The spec's guards are asked once, by the firings themselves: ``choose_many`` checks the proposals'
tiers, holds and protection but leaves the guards of ``offload`` and ``spill`` to the transaction
(``guarded=False``).  A victim the spec does not let offload (a spill victim spill) refuses the
transaction as ``choose`` would refuse it: everything rolled back, the disk files written deleted,
the refusals the firings counted taken back, and the room left to one victim at a time, which meets
the refusal and counts it there.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from morphcache.spec.expr import Index, Name, Reduce, walk

from .compiler import CompiledEvent
from .errors import CapacityError, GuardRefused, TierError
from .store import checksum

if TYPE_CHECKING:
    from .disktier import DiskTier
    from .pages import PageRecord
    from .pipeline import Pipeline
    from .tiering import TierMover

# fewer victims than this: their events fired one by one (a vector batch of each event costs some 25-50 us,
# a victim's offload and offload_done alone about 2-3 us with its spill, each guard asked once; with room
# made ahead, the trace replay's rooms of 16-71 victims cross near 64: one by one ~65 us at 20 victims and
# 10 spills, ~175 us at 68 and 55, the batches ~90 and ~170 us)
SINGLE_BELOW = 64
MOVES = ("offload", "offload_done", "spill", "drop")


def page_local(ev: CompiledEvent) -> bool:
    """Whether ``ev`` reads and writes only its own page's state (no reader, domain, aggregate)."""
    if ev.scope != "page" or ev.params or ev.observes:
        return False
    if any(eff.index != "p" or eff.star is not None for eff in ev.effects):
        return False
    for e in [c.expr for c in ev.conjuncts] + [eff.expr for eff in ev.effects]:
        for node in walk(e):
            if isinstance(node, Reduce) or (isinstance(node, Name) and node.name != "p"):
                return False
            if isinstance(node, Index) and not (len(node.args) == 1 and isinstance(node.args[0], Name)):
                return False
    return True


def make_room_batch(tiers: TierMover, k: int, protect: set[int] | frozenset[int]) -> bool:
    """Free ``k`` GPU slots in one go (the caller holds ``protect``); False when the batch could differ
    from ``k`` single victims, with nothing changed (then the caller takes them one at a time).

    Nothing else runs while it does (the lock is held, no victim is dropped or forgotten): the
    victims and spills need no hold (``choose_many`` accepted none that is held or in flight), and a
    page a ``collect`` deferred is collected as the end of such a hold would (``Busy.deferred``)."""
    storage, seam = tiers.storage, tiers.seam
    host, disk = storage.host, storage.disk
    if disk is None or tiers.config.host_pages == 0 or disk.leftovers or not tiers.batchable:
        return False
    # ``choose`` accepts a victim the spec lets offload or drop; the batch needs each to offload (a
    # spill victim to spill): the firings' own guards refuse the batches that ``choose_many`` asking for
    # that event alone would (then rolled back: one at a time meets the refusal)
    moved: list[PageRecord] = []  # the victims' records (``choose_many`` found each live, on its tier)
    victims = seam.choose_many("gpu", ("offload",), protect, k, guarded=False, recs=moved)
    if victims is None:
        return False
    first = max(0, host.capacity - len(host))  # the victims before the host tier is full
    # (the victims are GPU pages: a host proposal naming one is refused by its tier, protected or not)
    spilled: list[PageRecord] = []
    if k > first:
        spills = seam.choose_many("host", ("spill",), protect, k - first, guarded=False, recs=spilled)
        if spills is None or len(disk) + len(spills) > disk.capacity:
            return False
    else:
        spills, first = [], k
    if spills:
        copies = host.get_many(spills)
        checks = [rec.checksum for rec in spilled]
        if None in copies or None in checks:
            return False
    try:
        datas = storage.read_many(moved)
    except Exception:  # noqa: BLE001 - a data plane that cannot give a payload: one at a time meets it there
        return False
    try:
        if spills:
            try:  # the spills' records, adjacent slots written together (all or none)
                disk.put_many(spills, copies, checks)  # type: ignore[arg-type]
            except (CapacityError, TierError):
                return False
            if not _fire(tiers.pipe, k, victims, spills, disk):
                return False
            host.remove_many(spills)
            # the policy told in the one-at-a-time order: v_1 .. v_first (the host had room), then h_i, v_i
            told = [*moved[:first], *chain.from_iterable(zip(spilled, moved[first:], strict=True))]
            kinds = _TOLD[0] * first + _TOLD[1] * len(spills)
            olds = _WAS[0] * first + _WAS[1] * len(spills)
        else:
            if not _fire(tiers.pipe, k, victims, spills, disk):
                return False
            told, kinds, olds = moved, _TOLD[0] * k, _WAS[0] * k
        host.put_many(victims, datas)
        for rec, check in zip(moved, map(checksum, datas), strict=True):
            rec.checksum = check
        storage.free_slots(moved)
        seam.moved_many(told, kinds, olds)  # (each page left the tier ``choose_many`` found it on)
        bytes_moved = tiers.metrics.bytes_moved
        if spills:
            bytes_moved["host->disk"] += sum(map(len, copies))  # type: ignore[arg-type]
        bytes_moved["gpu->host"] += sum(map(len, datas))
        seam.accepted("gpu", k)
        seam.accepted("host", len(spills))
        return True
    finally:
        if tiers.busy.deferred:
            tiers.release_held(())


_TOLD = (["host"], ["disk", "host"])  # where a victim goes; a spill, then its victim
_WAS = (["gpu"], ["host", "gpu"])  # where they were


def _fire(pipe: Pipeline, k: int, victims: list[int], spills: list[int], disk: DiskTier) -> bool:
    """The room's events in one transaction: the spills, then each victim's offload and offload_done
    (vector batches from ``SINGLE_BELOW`` victims).  False when a guard refuses one of them: nothing
    fired, no refusal counted; then and when it fails, the spills' disk records deleted."""
    try:
        with pipe.tentative(MOVES):
            if k < SINGLE_BELOW:
                if spills:
                    spill = pipe.firer("spill")
                    for pid in spills:
                        spill(None, pid, None, None)
                offload, done = pipe.firer("offload"), pipe.firer("offload_done")
                for pid in victims:
                    offload(None, pid, None, None)
                    done(None, pid, None, None)
            else:
                if spills:
                    pipe.fire_batch("spill", None, np.asarray(spills, dtype=np.int64), distinct=True)
                ids = np.asarray(victims, dtype=np.int64)
                pipe.fire_batch("offload", None, ids, distinct=True)
                pipe.fire_batch("offload_done", None, ids, distinct=True)
    except BaseException as exc:
        for pid in spills:
            disk.remove(pid)
        if not isinstance(exc, GuardRefused):
            raise
        return False
    return True
