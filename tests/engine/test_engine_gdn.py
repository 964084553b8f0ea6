"""Differential tests on the GDN hybrid (3 linear : 1 full attention): every exact path against the
golden forward, the recurrent-state data plane, and the unsafe mode's drift.

The workloads run on the kernels' plain-torch references (the Triton interpreter would take minutes
on the linear layers' prefill); one test runs the Triton kernels at a small size."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import torch
from eng_helpers import TOL, C, RunLog, chaos_workload, make_engine, random_workload, run_workload

from morphcache.engine import Engine, EngineCapacityError, ServeResult
from morphcache.model import HybridModel, IncrementalState, golden_logits

SEED = 1


def _tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(256) for _ in range(n)]


@pytest.fixture(scope="module")
def chaos(gdn_model: HybridModel, tmp_path_factory: pytest.TempPathFactory) -> RunLog:
    engine = make_engine(gdn_model, tmp_path_factory.mktemp("gdn"), ops="reference")
    try:
        return run_workload(engine, chaos_workload(SEED))
    finally:
        engine.close()


def test_every_exact_path_matches_the_golden_forward(chaos: RunLog) -> None:
    assert len(chaos.diffs) == 8
    assert max(chaos.diffs) <= TOL, chaos.diffs


def test_the_workload_walks_the_exact_paths(chaos: RunLog) -> None:
    reports = [r.report for r in chaos.results]
    paths: Counter[str] = Counter()
    for rep in reports:
        paths.update(rep.recoveries)
    assert paths["prefetch"] >= 3 and paths["recompute"] >= 1, paths  # host and disk prefetch, a corrupt page
    assert reports[0].nominal == 0 and reports[0].state_path == "none"  # a miss prefills everything
    assert any(rep.reused % C for rep in reports), "a hit in the middle of a page"
    assert any(rep.decoded for rep in reports)
    for rep in reports:
        assert rep.exact
        if rep.reused:  # the state restored, or recomputed from the runtime's nearest usable checkpoint
            assert rep.state_path in ("restore", "recompute") and rep.checkpoint_tokens % C == 0
            assert rep.linear_tokens == rep.reused - rep.checkpoint_tokens
            assert rep.linear_token_layers == rep.linear_tokens * 7  # layers 0 .. 6: the last linear layer is 6
        else:
            assert rep.linear_tokens == 0
    assert any(rep.checkpoint_tokens for rep in reports)  # checkpoints were read back
    assert sum(rep.corrupt_pages for rep in reports) == 1
    assert sum(rep.prefetched_bytes for rep in reports) > 0  # attention pages offloaded and prefetched back


@pytest.mark.parametrize("seed", [21, 22])
def test_random_workloads(gdn_model: HybridModel, tmp_path: Path, seed: int) -> None:
    engine = make_engine(gdn_model, tmp_path, ops="reference", gpu_pages=12, host_pages=4, disk_pages=6)
    try:
        log = run_workload(engine, random_workload(seed, 24))
    finally:
        engine.close()
    assert max(log.diffs) <= TOL, log.diffs
    assert sum(r.report.reused for r in log.results) > 0
    assert engine.states.owner == {}  # every working slot given back


def test_full_hit_and_decode_across_a_page_boundary(gdn_model: HybridModel) -> None:
    engine = make_engine(gdn_model, None, ops="reference")
    prompt = _tokens(5, 2 * C - 2)
    first = engine.serve(prompt, decode=4)  # decodes across the boundary at 2C
    gold = golden_logits(gdn_model, list(first.tokens))
    assert float((first.logits - gold).abs().max()) <= TOL
    again = engine.serve(list(first.tokens[:2 * C + 1]))  # a full hit: every token but the last is cached
    assert again.start == 2 * C and again.report.state_path == "restore"  # the decode saved the state at 2C
    assert again.report.linear_tokens == 0 and again.report.checkpoint_tokens == 2 * C
    assert engine.golden_diff(again) <= TOL
    engine.check_integrity()
    engine.close()


def test_pools_hold_attention_kv_and_recurrent_states_apart(gdn_model: HybridModel) -> None:
    engine = make_engine(gdn_model, None, ops="reference", gpu_pages=5, state_slots=2)
    cfg = gdn_model.config
    pools, states = engine.pools, engine.states
    assert pools.attention == (3, 7) and pools.kinds == ("raw_k", "raw_v")  # no raw KV for linear layers
    assert pools.stacked["raw_k"].shape == (2, 5, C, cfg.n_kv_heads, cfg.head_dim)
    assert pools.page_bytes == 4 * 2 * 2 * C * cfg.n_kv_heads * cfg.head_dim
    assert states.stacked.shape == (6, 2 + 5, cfg.n_kv_heads, cfg.head_dim, cfg.head_dim)
    assert states.checkpoint_row(4) == 6
    engine.close()


def _check_checkpoints(engine: Engine, model: HybridModel, result: ServeResult, blocks: int) -> None:
    """The checkpoint row of each of the first ``blocks`` pages holds the reference state after it."""
    ref = IncrementalState(model)
    for b in range(blocks):
        ref.extend(list(result.tokens[b * C:(b + 1) * C]))
        want = ref.checkpoint()
        slot = int(engine.manager.page_state(result.pages[b])["gpu_slot"])
        row = engine.states.checkpoint_row(slot)
        for j, layer in enumerate(model.config.linear_layers):
            got = engine.states.state(layer, row)
            assert torch.allclose(got, want.states[j], atol=1e-5), (b, layer)


def test_checkpoints_saved_at_page_boundaries_are_the_reference_states(gdn_model: HybridModel) -> None:
    engine = make_engine(gdn_model, None, ops="reference")
    result = engine.serve(_tokens(8, 2 * C + 5), decode=C - 5)  # the decode completes block 2
    _check_checkpoints(engine, gdn_model, result, 3)
    engine.close()


def test_a_sequence_longer_than_the_context_limit_is_refused(gdn_model: HybridModel) -> None:
    engine = make_engine(gdn_model, None, ops="reference", max_context=3 * C)
    assert engine.manager.config.window == 3 * C and engine.manager.config.max_sequence_tokens == 3 * C
    with pytest.raises(EngineCapacityError):
        engine.serve(_tokens(1, 3 * C - 1), decode=2)
    assert engine.golden_diff(engine.serve(_tokens(1, 3 * C - 1), decode=1)) <= TOL
    engine.close()


def test_triton_kernels_serve_the_exact_paths(gdn_model: HybridModel) -> None:
    engine = make_engine(gdn_model, None, ops="triton")
    prompt = _tokens(3, 2 * C - 1)
    first = engine.serve(prompt, decode=2)  # prefill (gdn_prefill), decode across the boundary (gdn_decode)
    assert engine.golden_diff(first) <= TOL
    _check_checkpoints(engine, gdn_model, first, 2)  # saved by gdn_prefill (block 0) and gdn_decode (block 1)
    hit = engine.serve(prompt[:C + 5] + [1, 2, 3])  # a hit in the middle of page 1: copy-on-write + rebuild
    assert hit.start == C + 5 and hit.report.state_path == "recompute"  # from the checkpoint at C
    assert hit.report.linear_tokens == 5 and hit.report.checkpoint_tokens == C
    assert engine.golden_diff(hit) <= TOL
    engine.check_integrity()
    engine.close()


def test_unsafe_mode_drifts_on_a_stale_recurrent_state(gdn_model: HybridModel) -> None:
    """Nothing but the linear layers' state is wrong: the hit pages never left the GPU, and the working
    slot still holds the state another sequence left there."""
    a, b = _tokens(11, 2 * C + 3), _tokens(12, 2 * C + 7)
    diffs = {}
    for unsafe in (False, True):
        engine = make_engine(gdn_model, None, ops="reference", unsafe=unsafe)
        engine.serve(a)
        engine.serve(b)  # its state is what the working slot holds afterwards
        again = engine.serve(a + [5, 6, 7])
        assert again.start == 2 * C and engine.manager.metrics().events_fired.get("offload", 0) == 0
        diffs[unsafe] = engine.golden_diff(again)
        assert again.report.state_path == ("trusted" if unsafe else "restore") and again.report.exact
        engine.close()
    assert diffs[False] <= TOL
    assert diffs[True] > 100 * TOL, diffs


def test_unsafe_chaos_workload_drifts(gdn_model: HybridModel, tmp_path: Path) -> None:
    engine = make_engine(gdn_model, tmp_path, ops="reference", unsafe=True)
    try:
        log = run_workload(engine, chaos_workload(SEED))
    finally:
        engine.close()
    drifted = [i for i, d in enumerate(log.diffs) if not d <= TOL]
    assert drifted and max(log.diffs) > 100 * TOL, log.diffs
    assert all(log.results[i].report.reused > 0 for i in drifted)  # drift only where a hit was trusted


def test_state_slots_and_engine_config(gdn_model: HybridModel) -> None:
    from morphcache.engine import EngineConfig, StatePools, StateSlotsExhaustedError
    from morphcache.model import ModelConfig

    pools = StatePools(gdn_model.config, 2, 3)
    assert (pools.claim("a"), pools.claim("b")) == (0, 1)
    with pytest.raises(StateSlotsExhaustedError, match="held"):
        pools.claim("c")
    pools.give_back(0)
    assert pools.claim("c") == 0
    with pytest.raises(ValueError, match="shipped model configuration"):
        EngineConfig(model=ModelConfig(d_model=32), weights="trained")
    with pytest.raises(ValueError, match="weights"):
        EngineConfig(weights="random")
    config = EngineConfig.named("gdn-hybrid", weights="trained", ops="reference", gpu_pages=4, host_pages=0)
    assert config.runtime_window == 4096 and EngineConfig().runtime_window == ModelConfig().window
    with Engine(config) as engine:
        assert engine.model.config == gdn_model.config
        assert not torch.equal(engine.model.embedding, gdn_model.embedding)  # the trained weights, not seed 0
        assert engine.golden_diff(engine.serve(_tokens(9, C + 3), decode=1)) <= TOL
