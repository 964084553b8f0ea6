"""``check_integrity``: the spec's invariants on the live state, and the runtime's own bookkeeping.

Spec invariants and lemmas (compiled) are evaluated

- in the view of every live sequence, and
- in the global view (every page id) when they read no system state, so pages that no sequence holds
  (the reuse pool, pages on host or disk) are covered too.

Runtime invariants: pin counts equal live leases, tier occupancy within capacity, every page's
payload in exactly the store its tier state names, no page id leaked, chain and index bookkeeping,
and every cached derivation (readiness masks, pool aggregates) equal to a fresh evaluation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import binding as B
from .compiler import CompiledProperty
from .errors import IntegrityError
from .views import View

if TYPE_CHECKING:
    from .base import ManagerBase


def _property(prop: CompiledProperty, view: View, problems: list[str]) -> None:
    n, a = view.names, view.arrays
    if prop.fn(n, a):
        return
    where = f"'{prop.prop.name}' fails in {view.label}"
    if prop.body is not None and prop.var is not None:
        bad = []
        names = dict(n)
        for q in range(view.pages):
            names[prop.var] = q
            if not prop.body(names, a):
                bad.append(q)
        for q in bad[:5]:
            values = ", ".join(f"{k}={a[k][q]!r}" for k in sorted(prop.reads) if k in a)
            problems.append(f"{where} at block {q} (page {view.page_at(q)}): {values}")
        if bad:
            return
    shown = ", ".join(f"{k}={n[k]!r}" for k in sorted(prop.reads) if k in n)
    problems.append(f"{where}: {prop.text} [{shown}]")


def _spec_invariants(m: ManagerBase, problems: list[str]) -> None:
    invariants = m.cspec.invariants
    for seq in m.core.seqs.values():
        for prop in invariants:
            _property(prop, seq.view, problems)
    g = m.core.global_view()
    for prop in invariants:
        if prop.system_free:
            _property(prop, g, problems)


def _pins(m: ManagerBase, problems: list[str]) -> None:
    held: dict[int, int] = {}
    for lid, lease in m.leases.items():
        if lease.released:
            problems.append(f"lease #{lid} is released but still registered")
        for pid in lease.pages:
            held[pid] = held.get(pid, 0) + 1
            if pid not in m.pages.info:
                problems.append(f"lease #{lid}: page {pid} was forgotten while leased")
    for pid in m.pages.info:
        pin = m.cols[B.PIN][pid]
        if pin != held.get(pid, 0):
            problems.append(f"page {pid}: pin={pin} but {held.get(pid, 0)} live lease pin(s)")


def _tiers(m: ManagerBase, problems: list[str]) -> None:
    if m.slots.used > m.slots.slots:
        problems.append(f"GPU pool holds {m.slots.used} pages > {m.slots.slots} slots")
    if len(m.host) > m.host.capacity:
        problems.append(f"host tier holds {len(m.host)} pages > {m.host.capacity}")
    if m.disk is not None and len(m.disk) > m.disk.capacity:
        problems.append(f"disk tier holds {len(m.disk)} pages > {m.disk.capacity}")
    for pid, info in m.pages.info.items():
        tier = m.cols[B.TIER][pid]
        home = B.HOME.get(str(tier))
        stores = []
        if info.gpu_slot >= 0:
            stores.append("gpu")
            if m.slots.owner.get(info.gpu_slot) != pid:
                owner = m.slots.owner.get(info.gpu_slot)
                problems.append(f"page {pid}: GPU slot {info.gpu_slot} is owned by {owner}")
        if pid in m.host:
            stores.append("host")
        if m.disk is not None and pid in m.disk:
            stores.append("disk")
        want = [] if home is None else [home]
        if stores != want:
            problems.append(f"page {pid}: tier '{tier}' but payload in {stores or 'no store'}")
    owners = set(m.slots.owner.values())
    for pid in owners - set(m.pages.info):
        problems.append(f"GPU slot held by forgotten page {pid}")
    if len(owners) != len(m.slots.owner):
        problems.append("two GPU slots are owned by the same page")


def _ids(m: ManagerBase, problems: list[str]) -> None:
    live, free = set(m.pages.info), set(m.pages.free_ids)
    if live & free or len(free) != len(m.pages.free_ids) or live | free != set(range(m.pages.size)):
        problems.append(f"page ids leaked: {m.pages.size} ids, {len(live)} live, {len(free)} free")
    for pid in free:
        for name, col in m.cols.items():
            if col[pid] != m.pages.init[name]:
                problems.append(f"free page id {pid}: {name}={col[pid]!r}, not its initial value")
    for pid, info in m.pages.info.items():
        holder = (info.seqs or m.cols[B.POOL][pid] == "pooled" or m.cols[B.PIN][pid] or info.children
                  or pid in m.inflight)
        if not holder:
            problems.append(f"page {pid} is held by nothing (leaked)")
        if info.parent >= 0 and info.parent not in m.pages.info:
            problems.append(f"page {pid}: parent {info.parent} was forgotten")
    children: dict[int, int] = {}
    for info in m.pages.info.values():
        if info.parent >= 0:
            children[info.parent] = children.get(info.parent, 0) + 1
    for pid, info in m.pages.info.items():
        if info.children != children.get(pid, 0):
            problems.append(f"page {pid}: children={info.children}, counted {children.get(pid, 0)}")


def _sequences(m: ManagerBase, problems: list[str]) -> None:
    for sid, seq in m.core.seqs.items():
        if seq.view.names["pages"] != len(seq.block):
            problems.append(f"sequence {sid!r}: pages={seq.view.names['pages']} but {len(seq.block)} blocks")
        for i, pid in enumerate(seq.block):
            info = m.pages.info.get(pid)
            if info is None:
                problems.append(f"sequence {sid!r}: block {i} is forgotten page {pid}")
                continue
            if info.depth != i or info.seqs.get(sid) is not seq:
                problems.append(f"sequence {sid!r}: block {i} page {pid} (depth {info.depth}) not linked")
    for pid, info in m.pages.info.items():
        for sid in info.seqs:
            holder = m.core.seqs.get(sid)
            if holder is None or pid not in holder.block:
                problems.append(f"page {pid}: held by sequence {sid!r}, which does not hold it")


def _caches(m: ManagerBase, problems: list[str]) -> None:
    for pid in m.pages.info:
        cached = m.pages.masks[pid]
        if cached is not None:
            m.pages.masks[pid] = None
            fresh = m._mask(pid)
            if fresh != cached:
                problems.append(f"page {pid}: cached readiness {cached:b} != fresh {fresh:b}")
    g = m.core.global_view()
    for name, agg in m.cspec.aggregates.items():
        names: dict[str, Any] = {}
        total = 0
        for pid in range(m.pages.size):
            names[agg.var] = pid
            v = agg.body(names, m.cols)
            total += int(v) if agg.kind == "sum" else int(not v) if agg.kind == "all" else int(bool(v))
        if total != m.core.agg_total[name]:
            kept = m.core.agg_total[name]
            problems.append(f"aggregate {agg.text}: maintained {kept}, fresh {total} ({g.label})")
    pooled = {pid for pid in m.pages.info if m.cols[B.POOL][pid] == "pooled"}
    if pooled != set(m.pooled):
        problems.append(f"pool bookkeeping {sorted(m.pooled)} != pooled pages {sorted(pooled)}")
    for h, pid in m.index.by_hash.items():
        info = m.pages.info.get(pid)
        if info is None or info.hash != h:
            problems.append(f"index entry {h:x} points at page {pid}, which does not carry that hash")
    on_gpu = {pid for pid, info in m.pages.info.items() if info.gpu_slot >= 0}
    if set(m.cold) | set(m.hot) != on_gpu or set(m.cold) & set(m.hot):
        problems.append("GPU LRU lists do not partition the pages on the GPU")


def check_integrity(m: ManagerBase) -> None:
    """Raise IntegrityError with every disagreement found (see module doc)."""
    problems: list[str] = []
    _spec_invariants(m, problems)
    _pins(m, problems)
    _tiers(m, problems)
    _ids(m, problems)
    _sequences(m, problems)
    _caches(m, problems)
    if problems:
        raise IntegrityError(problems)
