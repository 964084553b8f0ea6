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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from morphcache.spec.expr import Index, Name, Reduce, walk

from .compiler import CompiledEvent
from .errors import CapacityError, TierError
from .store import checksum

if TYPE_CHECKING:
    from .pages import PageRecord
    from .tiering import TierMover

SINGLE_BELOW = 8  # fewer victims than this: their events fired one by one (a vector batch's fixed cost is more)
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
    from ``k`` single victims, with nothing changed (then the caller takes them one at a time)."""
    storage, seam, pipe, pages = tiers.storage, tiers.seam, tiers.pipe, tiers.pages
    host, disk = storage.host, storage.disk
    if disk is None or tiers.config.host_pages == 0 or disk.leftovers or not tiers.batchable:
        return False
    # ``choose`` accepts a victim the spec lets offload or drop; the batch needs each to offload (a
    # spill victim to spill): asking for that event alone refuses the same batches, checking each once
    victims = seam.choose_many("gpu", ("offload",), protect, k)
    if victims is None:
        return False
    free_host = max(0, host.capacity - len(host))
    # (the victims are GPU pages: a host proposal naming one is refused by its tier, protected or not)
    spills = seam.choose_many("host", ("spill",), protect, k - free_host) if k > free_host else []
    if spills is None or len(disk) + len(spills) > disk.capacity:
        return False
    record = pages.records.__getitem__  # (each a live page: ``choose_many`` found its record)
    spilled = list(map(record, spills))
    copies = host.get_many(spills)
    if any(data is None or rec.checksum is None for rec, data in zip(spilled, copies, strict=True)):
        return False
    moved = list(map(record, victims))
    try:
        datas = [storage.data.read(rec.gpu_slot) for rec in moved]
    except Exception:  # noqa: BLE001 - a data plane that cannot give a payload: one at a time meets it there
        return False
    held = [*victims, *spills]
    tiers.busy.hold(held)
    try:
        try:  # the spills' records, adjacent slots written together (all or none)
            disk.put_many(spills, copies, [rec.checksum for rec in spilled])  # type: ignore[arg-type,misc]
        except (CapacityError, TierError):
            return False
        written = spills
        try:
            with pipe.atomic():
                if k < SINGLE_BELOW:
                    fire = pipe.fire
                    for pid in spills:
                        fire("spill", None, pid)
                    for pid in victims:
                        fire("offload", None, pid)
                        fire("offload_done", None, pid)
                else:
                    if spills:
                        pipe.fire_batch("spill", None, np.asarray(spills, dtype=np.int64), distinct=True)
                    ids = np.asarray(victims, dtype=np.int64)
                    pipe.fire_batch("offload", None, ids, distinct=True)
                    pipe.fire_batch("offload_done", None, ids, distinct=True)
        except BaseException:
            for pid in written:
                disk.remove(pid)
            raise
        first = k - len(spills)  # the victims before it found the host tier full
        host.remove_many(spills)
        host.put_many(victims, datas)
        for rec, data in zip(moved, datas, strict=True):
            rec.checksum = checksum(data)
        # the policy told in the one-at-a-time order: v_1 .. v_first (the host had room), then h_i, v_i
        told: list[PageRecord] = moved[:first]
        for pair in zip(spilled, moved[first:], strict=True):
            told += pair
        tiers_now = ["host"] * first + ["disk", "host"] * len(spills)
        storage.free_slots(moved)
        seam.moved_many(told, tiers_now)
        bytes_moved = tiers.metrics.bytes_moved
        if spills:
            bytes_moved["host->disk"] += sum(map(len, copies))  # type: ignore[arg-type]
        bytes_moved["gpu->host"] += sum(map(len, datas))
        seam.accepted("gpu", k)
        seam.accepted("host", len(spills))
        return True
    finally:
        tiers.release_held(held)
