"""``check_integrity``: the spec's invariants on the live state, and the runtime's own bookkeeping.

Spec invariants and lemmas that read no ghost are evaluated once on the whole live state (every live
page and reader, quantifiers over the runtime's domains); a failing ``all`` names every element that
breaks it with the values it read.  The runtime's invariants: pins equal live leases, every page's
payload in exactly the stores its tier names (a page whose copy is in flight may also be at its
source), tiers within capacity, no page id or reader leaked, chain and index bookkeeping, block
tables equal to the ``block`` entries (their last pages to the tip columns), maintained aggregates
and pool sets equal to a fresh count, policy metadata equal to the state.  It knows what is in
flight, so it is exact while copies run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from morphcache.spec.expr import Const, Reduce
from morphcache.spec.pycode import compile_source

from .binding import BLOCK, DEPTH, HOME, LPIN, POOL, TAIL, TIER
from .compiler import CompiledProperty
from .errors import IntegrityError

if TYPE_CHECKING:
    from .manager import CacheManager


def _spec(m: CacheManager, problems: list[str]) -> None:
    pipe = m.parts.pipe
    names: dict[str, Any] = dict(pipe.names.n)
    arrays = pipe.store.arrays
    for prop in pipe.cspec.invariants:
        names.pop("r", None)
        names.pop("p", None)
        if prop.fn(names, arrays):
            continue
        problems.extend(_explain(m, prop, names))


def _explain(m: CacheManager, prop: CompiledProperty, names: dict[str, Any]) -> list[str]:
    e = prop.expr
    where = f"'{prop.prop.name}' fails"
    pipe = m.parts.pipe
    if isinstance(e, Reduce) and e.kind == "all":
        body = compile_source(e.body)
        out = []
        over_pages = pipe.cspec.domains[e.domain].kind in ("live_pages", "reader_pages")
        for i in list(names[e.domain](names)):
            inner = dict(names, **{e.var: i})
            if body(inner, pipe.store.arrays):
                continue
            what = "page" if over_pages else "reader"
            r, q = (None, i) if over_pages else (i, None)
            shown = ", ".join(pipe.refusals.values(prop.reads, r, q, False))
            out.append(f"{where} at {what} {i}: {shown}")
            if len(out) >= 5:
                break
        if out:
            return out
    return [f"{where}: {prop.text}"]


def _pins(m: CacheManager, problems: list[str]) -> None:
    p = m.parts
    held: dict[tuple[int, int], int] = {}
    for lid, lease in p.leases.leases.items():
        if lease.released:
            problems.append(f"lease #{lid} is released but still registered")
        for pid in lease.pinned:
            held[(lease.reader, pid)] = held.get((lease.reader, pid), 0) + 1
            if pid not in p.pages:
                problems.append(f"lease #{lid}: page {pid} was forgotten while leased")
    store = p.pipe.store
    for rid, row in store.rp_table(LPIN).items():
        for pid, count in row.items():
            if count != held.get((rid, pid), 0):
                problems.append(f"page {pid}: lpin[{rid}, p]={count} but {held.get((rid, pid), 0)} live lease(s)")
    for (rid, pid), count in held.items():
        if store.rp_value(LPIN, rid, pid) != count:
            problems.append(f"page {pid}: lpin[{rid}, p]={store.rp_value(LPIN, rid, pid)} but {count} live lease(s)")
    for pid in p.pages:
        pin = store.page("pin", pid)
        total = sum(store.rp_value(LPIN, rid, pid) for rid in store.readers_at((LPIN,), pid))
        if pin != sum(n for (rid, q), n in held.items() if q == pid):
            problems.append(f"page {pid}: pin={pin} but {total} live lease pin(s)")


def _tiers(m: CacheManager, problems: list[str]) -> None:
    p = m.parts
    storage, store, dec = p.storage, p.pipe.store, p.pipe.cspec.decode
    slots = storage.slots
    if slots.used > slots.slots:
        problems.append(f"GPU pool holds {slots.used} pages > {slots.slots} slots")
    if len(storage.host) > storage.host.capacity:
        problems.append(f"host tier holds {len(storage.host)} pages > {storage.host.capacity}")
    if storage.disk is not None and len(storage.disk) > storage.disk.capacity:
        problems.append(f"disk tier holds {len(storage.disk)} pages > {storage.disk.capacity}")
    for pid, rec in p.pages.records.items():
        tier = str(dec(TIER, store.page(TIER, pid)))
        home = HOME.get(tier)
        stores = storage.where(pid, rec.gpu_slot)
        if rec.gpu_slot >= 0 and slots.owner.get(rec.gpu_slot) != pid:
            problems.append(f"page {pid}: GPU slot {rec.gpu_slot} is owned by {slots.owner.get(rec.gpu_slot)}")
        allowed = [[] if home is None else [home]]
        if pid in p.busy.inflight and tier == "prefetching":
            allowed += [["gpu", rec.meta.tier]]  # the copy in flight still reads its source
        if stores not in allowed:
            problems.append(f"page {pid}: tier '{tier}' but payload in {stores or 'no store'}")
        if rec.meta.tier != (tier if tier in ("gpu", "host", "disk", "dropped") else rec.meta.tier):
            problems.append(f"page {pid}: policy metadata says tier {rec.meta.tier!r}, the state {tier!r}")
    owners = set(slots.owner.values())
    for pid in owners - set(p.pages.records):
        problems.append(f"GPU slot held by forgotten page {pid}")
    if len(owners) != len(slots.owner):
        problems.append("two GPU slots are owned by the same page")


def _carried_by_reuse(m: CacheManager) -> frozenset[str]:
    """The page state a freed id keeps for its next use, read off the spec's ``forget``: what it sets
    to something other than a constant (the generation goes on counting, so a reused id never repeats
    one), and what it neither sets, reads in its guard nor owns (a linear layer's checkpoint stays
    until dropped; its generation tells it stale).  Everything else must be back at its initial value."""
    pipe = m.parts.pipe
    ev, cev = pipe.cspec.spec.event("forget"), pipe.cspec.events["forget"]
    set_by = {e.target: e.value for e in ev.effects}
    read = frozenset().union(*(c.reads for c in cev.conjuncts))
    return frozenset(n for n in pipe.store.page_names
                     if (n in set_by and not isinstance(set_by[n], Const))
                     or (n not in set_by and n not in read and n != cev.owner))


def _ids(m: CacheManager, problems: list[str]) -> None:
    p = m.parts
    store = p.pipe.store
    live, free = set(store.live_pages), set(store.free_page_ids)
    if live != set(p.pages.records):
        problems.append(f"live page ids {sorted(live ^ set(p.pages.records))[:5]} disagree with the records")
    if live & free or live | free != set(range(store.next_page)):
        problems.append(f"page ids leaked: {store.next_page} ids, {len(live)} live, {len(free)} free")
    carried = _carried_by_reuse(m)
    for pid in free:
        for name in store.page_names:
            if name not in carried and store.page(name, pid) != store.init[name]:
                problems.append(f"free page id {pid}: {name}={store.page(name, pid)!r}, not its initial value")
        if store.readers_at((BLOCK, LPIN), pid):
            problems.append(f"free page id {pid} is in a block table or leased")
    for pid, rec in p.pages.records.items():
        if not p.collector.holds(pid):
            problems.append(f"page {pid} is held by nothing (leaked)")
        if rec.parent >= 0 and rec.parent not in p.pages:
            problems.append(f"page {pid}: parent {rec.parent} was forgotten")
        if store.page(DEPTH, pid) != rec.meta.depth:
            problems.append(f"page {pid}: depth {store.page(DEPTH, pid)} but its record says {rec.meta.depth}")
    children: dict[int, int] = {}
    for rec in p.pages.records.values():
        if rec.parent >= 0:
            children[rec.parent] = children.get(rec.parent, 0) + 1
    for pid, rec in p.pages.records.items():
        if rec.children != children.get(pid, 0):
            problems.append(f"page {pid}: children={rec.children}, counted {children.get(pid, 0)}")
    if set(p.readers.by_rid) != set(store.live_readers):
        problems.append("reader records disagree with the live reader ids")


def _readers(m: CacheManager, problems: list[str]) -> None:
    p = m.parts
    store = p.pipe.store
    for rid, rec in p.readers.by_rid.items():
        row = store.rp_row(BLOCK, rid)
        if set(row) != set(rec.block) or len(rec.block) != len(row):
            problems.append(f"{rec!r}: block table {rec.block} but block entries at {sorted(row)}")
        depths = [store.page(DEPTH, pid) for pid in rec.block if pid in p.pages]
        if depths != list(range(len(depths))):
            problems.append(f"{rec!r}: block table depths {depths}")
        holders = sum(1 for lease in p.leases.leases.values() if lease.reader == rid)
        if holders != len(rec.leases):
            problems.append(f"{rec!r}: {len(rec.leases)} leases recorded, {holders} live")
    filling = store.cspec.codes[TAIL]["filling"]
    problems.extend(p.sequences.writer.tips.mismatches(
        {rid: rec.block for rid, rec in p.readers.by_rid.items()},
        lambda pid: p.pages.records[pid].gpu_slot if store.page(TAIL, pid) == filling else -1))
    for pid, page in p.pages.records.items():
        held_by = store.readers_at((BLOCK,), pid)
        if page.meta.holders != len(held_by):
            problems.append(f"page {pid}: policy metadata says {page.meta.holders} holders, the state {len(held_by)}")


def _caches(m: CacheManager, problems: list[str]) -> None:
    p = m.parts
    names = p.pipe.names
    store = p.pipe.store
    for name, agg in p.pipe.cspec.aggregates.items():
        body = names.agg_body[name]
        total = 0
        for pid in store.live_pages:
            v = body({agg.var: pid}, store.arrays)
            total += int(v) if agg.kind == "sum" else int(not v) if agg.kind == "all" else int(bool(v))
        if names.agg_dirty:
            names.refresh()
        kept = names.n[name] if agg.kind == "sum" else len(names.agg_contrib[name])
        if total != kept:
            problems.append(f"aggregate {agg.text}: maintained {kept}, fresh {total}")
    problems.extend(names.inc.stale())
    pooled_code = p.pipe.cspec.codes[POOL]["pooled"]
    pooled = {pid for pid in p.pages if store.page(POOL, pid) == pooled_code}
    if pooled != set(p.morph.pooled):
        problems.append(f"pool bookkeeping {sorted(p.morph.pooled)} != pooled pages {sorted(pooled)}")
    for pid in pooled:
        if not p.pages.records[pid].meta.pooled:
            problems.append(f"page {pid}: pooled, but its policy metadata says not")
    for h, pid in p.index.by_hash.items():
        rec = p.pages.find(pid)
        if rec is None or rec.hash != h:
            problems.append(f"index entry {h:x} points at page {pid}, which does not carry that hash")
    problems.extend(p.index.table.problems(p.index.by_hash))
    c = p.index.page_size
    problems.extend(p.index.sealed.problems(
        {pid: (rec.parent, rec.token_ids) for pid, rec in p.pages.records.items() if len(rec.token_ids) == c}))
    disk = p.storage.disk
    if disk is not None and disk.leftovers and m.metrics().extra.get("disk_leftover_files", 0) != len(disk.leftovers):
        problems.append(f"{len(disk.leftovers)} leftover disk files, not all counted")


def check_integrity(m: CacheManager) -> None:
    """Raise IntegrityError with every disagreement found (see module doc); call under the lock."""
    problems: list[str] = []
    _spec(m, problems)
    _pins(m, problems)
    _tiers(m, problems)
    _ids(m, problems)
    _readers(m, problems)
    _caches(m, problems)
    problems.extend(m.parts.recurrent.problems())
    if problems:
        raise IntegrityError(problems)
