"""Typed workload generators: deterministic by seed, well-formed, and reusing what their docstrings say."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from morphcache.workloads import (
    TypedRequest,
    TypedWorkload,
    WorkloadError,
    agentic,
    multi_turn_chat,
    phase_of,
    reasoning_chat,
    shifting_mixture,
    templated,
    trace_workload,
    typed_mixture,
)
from morphcache.workloads.typed import clip_spans

SMALL = {
    "chat": lambda seed: multi_turn_chat(seed, 20, mean_turns=3.0),
    "reasoning": lambda seed: reasoning_chat(seed, 15, mean_turns=3.0),
    "agentic": lambda seed: agentic(seed, 4, mean_steps=5.0),
    "masked": lambda seed: agentic(seed, 4, mean_steps=8.0, keep_observations=2),
    "templated": lambda seed: templated(seed, 60),
    "mixed": lambda seed: typed_mixture(seed, size=0.08),
    "shifting": lambda seed: shifting_mixture(seed, size=0.08),
}


def _typed(req: TypedRequest, prompt: bool = True) -> list[str]:
    """The type of every token of the prompt (or the output)."""
    spans = req.spans if prompt else req.output_spans
    out: list[str] = []
    for s, e, name in spans:
        out += [name] * (e - s)
    return out


@pytest.mark.parametrize("name", sorted(SMALL))
def test_deterministic_by_seed_and_well_formed(name: str) -> None:
    a, b, c = SMALL[name](3), SMALL[name](3), SMALL[name](4)
    assert a == b
    assert a != c
    assert a.requests, name
    ids = [r.request_id for r in a.requests]
    assert len(set(ids)) == len(ids)
    arrivals = [r.arrival_ms for r in a.requests]
    assert arrivals == sorted(arrivals)
    for i, r in enumerate(a.requests):
        assert r.order == i
        assert len(_typed(r)) == len(r.tokens) and len(_typed(r, False)) == len(r.output)
        assert all(0 <= t < 1 << 30 for t in r.tokens + r.output)


def _by_session(work: TypedWorkload) -> dict[str, list[TypedRequest]]:
    out: dict[str, list[TypedRequest]] = defaultdict(list)
    for r in work.requests:
        out[r.session].append(r)
    return out


def test_chat_turn_extends_previous_prompt_by_its_reply() -> None:
    work = SMALL["chat"](1)
    follow_ups = 0
    for turns in _by_session(work).values():
        assert _typed(turns[0])[0] == "system"
        for prev, nxt in zip(turns, turns[1:], strict=False):
            head = prev.tokens + prev.output
            assert nxt.tokens[: len(head)] == head
            assert set(_typed(nxt)[len(head):]) == {"user"}
            follow_ups += 1
    assert follow_ups > 0


def test_reasoning_is_never_in_a_later_prompt() -> None:
    work = SMALL["reasoning"](1)
    reasoning = {t for r in work.requests for (s, e, n) in r.output_spans if n == "reasoning"
                 for t in r.output[s:e]}
    prompts = {t for r in work.requests for t in r.tokens}
    assert reasoning and not reasoning & prompts
    for turns in _by_session(work).values():
        for prev, nxt in zip(turns, turns[1:], strict=False):
            reply = [t for t, kind in zip(prev.output, _typed(prev, False), strict=True) if kind == "response"]
            assert nxt.tokens[: len(prev.tokens) + len(reply)] == prev.tokens + tuple(reply)


def test_agent_step_appends_action_and_tool_output() -> None:
    work = SMALL["agentic"](2)
    for steps in _by_session(work).values():
        for prev, nxt in zip(steps, steps[1:], strict=False):
            head = prev.tokens + prev.output
            assert nxt.tokens[: len(head)] == head
            assert set(_typed(nxt)[len(head):]) == {"tool"}


def test_masked_agent_hides_old_tool_outputs() -> None:
    work = SMALL["masked"](2)
    diverged = 0
    for steps in _by_session(work).values():
        for prev, nxt in zip(steps, steps[1:], strict=False):
            if nxt.tokens[: len(prev.tokens)] != prev.tokens:
                diverged += 1
                tools = [s for s in nxt.spans if s[2] == "tool"]
                assert len(tools) > 2 and all(e - s == 1 for s, e, _ in tools[:-2])
    assert diverged > 0


def test_templated_requests_are_single_turn_and_share_templates() -> None:
    work = SMALL["templated"](5)
    assert len({r.session for r in work.requests}) == len(work.requests)
    firsts = defaultdict(int)
    for r in work.requests:
        s, e, kind = r.spans[0]
        assert kind == "system"
        firsts[r.tokens[s:e]] += 1
    assert max(firsts.values()) > 1
    assert any(kind == "document" for r in work.requests for _, _, kind in r.spans)


def test_shifting_mixture_phases() -> None:
    work = SMALL["shifting"](0)
    assert work.phases[0] == 0 and 0 < work.phases[1] < len(work.requests)
    first = {r.task for r in work.requests[: work.phases[1]]}
    assert first <= {"chat", "template"}
    assert {"reasoning", "agent"} <= {r.task for r in work.requests[work.phases[1]:]}
    assert phase_of(work, 0) == 0 and phase_of(work, len(work.requests) - 1) == 1
    with pytest.raises(WorkloadError):
        phase_of(work, len(work.requests))


def test_bad_spans_are_refused() -> None:
    with pytest.raises(WorkloadError, match="does not continue"):
        TypedRequest("r", 0, 0.0, "s", "t", (1, 2, 3), ((0, 1, "user"), (2, 3, "user")), (), ())
    with pytest.raises(WorkloadError, match="cover 2 of 3"):
        TypedRequest("r", 0, 0.0, "s", "t", (1, 2, 3), ((0, 2, "user"),), (), ())
    assert clip_spans(((0, 4, "system"), (4, 9, "user")), 3, 6) == ((0, 1, "system"), (1, 3, "user"))


def test_trace_adapter_infers_conversations(tmp_path: Path) -> None:
    lines = [
        {"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [0, 1, 2]},
        {"timestamp": 5, "input_length": 600, "output_length": 10, "hash_ids": [0, 7]},
        {"timestamp": 9, "input_length": 2000, "output_length": 10, "hash_ids": [0, 1, 3, 4]},
        {"timestamp": 12, "input_length": 700, "output_length": 10, "hash_ids": [0, 8]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    work = trace_workload(path, block_tokens=16)
    assert work.token_scale == 32
    assert [r.session for r in work.requests] == ["trace-s0", "trace-s1", "trace-s0", "trace-s3"]
    assert all(r.spans == () and r.task == "trace" for r in work.requests)
    assert [len(r.tokens) for r in work.requests] == [35, 19, 63, 22]
    assert [r.session for r in trace_workload(path, sessions=False).requests] == [f"trace-s{i}" for i in range(4)]
