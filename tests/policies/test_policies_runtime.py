"""Policies behind the CacheManager (``RuntimeConfig(policy=...)``): the notification contract holds, a
bad policy's proposals of pinned, unknown or misplaced pages are refused and counted, and nothing a
lease holds is ever moved."""

from __future__ import annotations

import dataclasses

import pytest
from pol_helpers import UNKNOWN_PAGE, BadPolicy, ContractPolicy, shipped_policies

from morphcache.runtime import CacheManager, EvictionPolicy, Ready, RuntimeConfig
from morphcache.workloads import TypedRequest, TypedWorkload, typed_mixture


@pytest.fixture(scope="module")
def work() -> TypedWorkload:
    w = typed_mixture(1, size=0.04)
    return TypedWorkload(w.name, w.requests[:40], w.token_scale)


def _config(gpu: int) -> RuntimeConfig:
    return RuntimeConfig(page_size=16, window=32, gpu_pages=gpu, host_pages=gpu // 2, pool_capacity=gpu + gpu // 2)


def _manager(config: RuntimeConfig, policy: EvictionPolicy) -> CacheManager:
    return CacheManager(config=dataclasses.replace(config, policy=policy))


def _replay(m: object, requests: tuple[TypedRequest, ...]) -> None:
    for req in requests:
        sid = req.request_id
        m.register(sid, session=req.session, task=req.task)  # type: ignore[attr-defined]
        res = m.lookup(req.tokens, owner=sid)  # type: ignore[attr-defined]
        served = 0
        if isinstance(res, Ready):
            served = res.lease.tokens
            m.attach(sid, res.lease, types=req.types_between(0, served))  # type: ignore[attr-defined]
            m.release(res.lease)  # type: ignore[attr-defined]
        m.append(sid, req.tokens[served:], types=req.types_between(served, len(req.tokens)))  # type: ignore
        m.append(sid, req.output, types=req.output_spans)  # type: ignore[attr-defined]
        m.free(sid)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(shipped_policies()))
def test_shipped_policies_keep_the_contract(name: str, work: TypedWorkload) -> None:
    largest = max(-(-(len(r.tokens) + len(r.output)) // 16) for r in work.requests)
    policy = ContractPolicy(shipped_policies()[name]())
    with _manager(_config(largest + 16), policy) as m:
        _replay(m, work.requests)
        m.check_integrity()
        assert policy.proposals > 0
        assert m.metrics().events_fired.get("offload", 0) > 0


def test_bad_policy_is_refused_and_counted(work: TypedWorkload) -> None:
    largest = max(-(-(len(r.tokens) + len(r.output)) // 16) for r in work.requests)
    held: list[int] = []
    bad = BadPolicy(lambda: list(held))
    with _manager(_config(largest + 16), bad) as m:
        m.register("pin")
        first = work.requests[0]
        m.append("pin", first.tokens, types=first.spans)
        lease = m.acquire("pin")  # pins the sequence's whole pages for the whole replay
        held.extend(lease.pinned)  # the whole pages and the partial last one (acquire_tail)
        _replay(m, work.requests[1:])
        view = m.read(lease)  # still readable: nothing the lease pins was moved
        assert len(view.slots) == len(lease.pinned)
        m.release(lease)
        m.check_integrity()
        reasons = {r for _, _, r in bad.refused}
        assert {"unknown page", "not in tier", "spec refuses offload and drop"} <= reasons
        pinned = {r for _, p, r in bad.refused if p in lease.pages}
        assert pinned and pinned <= {"spec refuses offload and drop", "not in tier", "spec refuses evict",
                                     "not in pool", "protected"}
        assert m.metrics().policy_refusals == len(bad.refused)
        assert any(p == UNKNOWN_PAGE for _, p, _ in bad.refused)
        assert any(p in lease.pages for _, p, _ in bad.refused)
