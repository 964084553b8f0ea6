"""One page admitted to a full pool (``Morphology.admit``: evict the victim, admit the page, one
transaction) with both moves noted together after the transaction against each move noted as its
firing writes it (the pool's watcher, the reference below): the same random workloads on two
managers admitting one page at a time; after every operation both must have given the same answer
(or refusal) and hold identical state, the pool's order and the policy's included.  A spec variant
refuses some admissions after their victim's eviction fired (undone, each write and its undoing
noted as the reference notes them)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import small_config, spec_variant
from test_runtime_poolbatch import big_writes, policy_state
from test_runtime_roombatch import Twins, drive

from morphcache.runtime import CacheManager
from morphcache.runtime.errors import GuardRefused
from morphcache.runtime.morphology import Morphology


def noted_as_fired(morph: Morphology, pid: int, refused: bool = False) -> bool:
    """``Morphology.admit`` with each firing's pool change noted by the watcher as it is written (and
    undone): the reference."""
    pipe = morph.pipe
    if not refused and pipe.propose("admit", None, pid):
        return True
    if len(morph.pooled) < morph.config.capacity or pid in morph.pooled:
        return False
    victim = morph.seam.choose("pool", ("evict",), {pid})
    if victim is None:
        return False
    sp = pipe.begin()
    try:
        pipe.fire("evict", None, victim)
        pipe.fire("admit", None, pid)
    except GuardRefused:
        pipe.rollback(sp)
        return False
    pipe.commit()
    morph.collector.collect(victim, keep=frozenset({pid}))
    return True


def pool_view(m: CacheManager) -> tuple[Any, ...]:
    """The pool's bookkeeping in its order, each pooled record's flag, and the policy's state."""
    morph = m.parts.morph
    return list(morph.pooled), [rec.pooled for rec in map(m.parts.pages.records.get, morph.pooled)], \
        policy_state(m)


def twins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: Path | None = None,
          **overrides: Any) -> tuple[list[CacheManager], Twins, list[bool]]:
    """Two managers admitting one page at a time, the second noting as it fires; the admissions made
    with a victim (True: admitted, False: refused after the choice)."""
    opts = dict(gpu_pages=60, host_pages=8, disk_pages=64, pool_capacity=8, prefetch_workers=1)
    opts.update(overrides)
    ms = [CacheManager(spec, config=small_config(tmp_path / name, **opts)) for name in ("together", "as-fired")]
    for m in ms:
        m.parts.morph.batchable = False
    reference, made = ms[1].parts.morph, []
    real = Morphology.admit

    def admit(morph: Morphology, pid: int, refused: bool = False) -> bool:
        if morph is reference:
            return noted_as_fired(morph, pid, refused)
        before = morph.seam.victims["pool"]
        done = real(morph, pid, refused)
        if morph.seam.victims["pool"] > before:
            made.append(done)
        return done

    monkeypatch.setattr(Morphology, "admit", admit)
    return ms, Twins(ms[0], ms[1]), made


@pytest.mark.parametrize("seed", [1, 2])
def test_moves_noted_together_are_moves_noted_as_fired(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       seed: int) -> None:
    ms, twin, made = twins(tmp_path, monkeypatch)
    drive(twin, random.Random(seed), 50, pool_view)
    assert True in made, "no page admitted with a victim"
    for m in ms:
        m.check_integrity()
        m.close()


def test_big_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ms, twin, made = twins(tmp_path, monkeypatch, gpu_pages=160, host_pages=32, pool_capacity=24)
    drive(twin, random.Random(7), 16, pool_view, write=big_writes, share=1, keep=2)
    assert True in made
    for m in ms:
        m.check_integrity()
        m.close()


def test_admission_refused_after_the_eviction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guard = "complete_morphology(p) and tier[p] == 'gpu' and depth[p] != 3 and " \
            "sum(1 if pool[q] == 'pooled' else 0 for q in pages) < CAPACITY"
    spec = spec_variant(tmp_path, {"objects.pool.events.admit.guard": guard})
    ms, twin, made = twins(tmp_path, monkeypatch, spec)
    drive(twin, random.Random(5), 60, pool_view)
    assert True in made and False in made, "no admission refused after its victim's eviction"
    for m in ms:
        m.check_integrity()
        m.close()
