"""Helpers of the runtime tests: a small configuration, spec variants, token runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from morphcache.runtime import SHIPPED_SPEC, RuntimeConfig

SMALL = dict(page_size=4, window=6, gpu_pages=16, host_pages=8, disk_pages=8, pool_capacity=8, max_pin=4)


def small_config(tmp: Path | None = None, **overrides: Any) -> RuntimeConfig:
    """C=4, W=6 and small tiers, so every policy path is reached in a few steps."""
    opts: dict[str, Any] = dict(SMALL)
    if tmp is not None:
        opts["disk_dir"] = str(tmp / "disk")
    else:
        opts["disk_pages"] = 0
    opts.update(overrides)
    return RuntimeConfig(**opts)


def spec_variant(tmp: Path, edits: dict[str, Any], name: str = "variant.yaml") -> Path:
    """A copy of the shipped spec with ``edits`` applied (dotted paths, e.g.
    ``objects.tier.events.offload.guard``); a value of None deletes the key."""
    doc = yaml.safe_load(SHIPPED_SPEC.read_text(encoding="utf-8"))
    for dotted, value in edits.items():
        node = doc
        keys = dotted.split(".")
        for key in keys[:-1]:
            node = node[key]
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    path = tmp / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def bare_store(m: Any, pages: int, readers: int) -> Any:
    """The state store of manager ``m`` with ``pages`` page ids and ``readers`` reader ids allocated
    (for tests that write rows directly)."""
    store = m.parts.pipe.store
    for _ in range(pages):
        store.alloc_page()
    for _ in range(readers):
        store.alloc_reader()
    return store


def toks(start: int, n: int) -> list[int]:
    """``n`` distinct tokens starting at ``start``."""
    return list(range(start, start + n))


def digest(m: Any) -> dict[str, Any]:
    """Everything observable about a manager's state, in a form two managers can be compared by: every
    page's spec values and chain facts, every reader's spec values and block table, the live leases,
    the pool and the counters."""
    p = m.parts
    store, dec = p.pipe.store, p.cspec.decode
    pages = {}
    for pid in sorted(m.page_ids()):
        st = dict(m.page_state(pid))
        meta = st.pop("meta")
        st.update(meta_tier=meta.tier, meta_holders=meta.holders, meta_pooled=meta.pooled, meta_uses=meta.uses,
                  meta_types=sorted(meta.types))
        pages[pid] = st
    readers = {}
    for rid, rec in sorted(p.readers.by_rid.items()):
        values: dict[str, Any] = {n: dec(n, store.reader(n, rid)) for n in store.reader_names}
        for n in store.rp_names:
            values[n] = {q: dec(n, v) for q, v in sorted(store.rp_row(n, rid).items())}
        readers[rid] = (rec.name, tuple(rec.block), values)
    leases = sorted((lease.reader, lease.pages, lease.generations, lease.tokens,
                     -1 if lease.tail is None else lease.tail) for lease in p.leases.leases.values())
    snap = m.metrics()
    return {"pages": pages, "readers": readers, "leases": leases, "pooled": m.cached_pages(),
            "fired": snap.events_fired, "refused": snap.events_refused, "lookups": (
                snap.lookups, snap.nominal_tokens, snap.effective_tokens, snap.misses, snap.ready),
            "index": dict(p.index.by_hash)}
