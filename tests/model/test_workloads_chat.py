"""The synthetic multi-turn chat workload."""

from __future__ import annotations

import pytest

from morphcache.workloads import SYSTEM_PROMPTS, Request, shared_prefix_len, synthetic_chat


def _by_conversation(reqs: list[Request]) -> dict[str, list[Request]]:
    convs: dict[str, list[Request]] = {}
    for r in reqs:
        convs.setdefault(r.request_id.split("-")[0], []).append(r)
    for turns in convs.values():
        turns.sort(key=lambda r: int(r.request_id.split("turn")[1]))
    return convs


def test_deterministic_from_seed() -> None:
    assert synthetic_chat(7, 5, 4) == synthetic_chat(7, 5, 4)
    assert synthetic_chat(7, 5, 4) != synthetic_chat(8, 5, 4)


def test_shape_ids_order_and_tokens() -> None:
    reqs = synthetic_chat(1, 6, 3)
    assert len(reqs) == 18
    assert len({r.request_id for r in reqs}) == 18
    assert [r.arrival_ms for r in reqs] == sorted(r.arrival_ms for r in reqs)
    assert all(0 <= t <= 255 for r in reqs for t in r.tokens)
    assert all(r.output_len > 0 for r in reqs)


def test_turns_extend_previous_prompt_by_reply_and_user_message() -> None:
    for turns in _by_conversation(synthetic_chat(2, 5, 4)).values():
        for prev, cur in zip(turns, turns[1:], strict=False):
            assert cur.tokens[: prev.prompt_len] == prev.tokens
            assert cur.arrival_ms > prev.arrival_ms
            appended = bytes(cur.tokens[prev.prompt_len :])
            assert appended.startswith(b"\nAssistant: ")
            reply, user = appended[: prev.output_len], appended[prev.output_len :]
            assert b"\nUser: " not in reply and user.startswith(b"\nUser: ")


def test_system_prompts_shared_across_conversations() -> None:
    reqs = synthetic_chat(3, 12, 1, n_system_prompts=2)
    systems = {p.encode() for p in SYSTEM_PROMPTS[:2]}
    used = {s for r in reqs for s in systems if bytes(r.tokens).startswith(s)}
    assert used == systems
    assert all(any(bytes(r.tokens).startswith(s) for s in systems) for r in reqs)
    a, b = [r for r in reqs if bytes(r.tokens).startswith(SYSTEM_PROMPTS[0].encode())][:2]
    assert shared_prefix_len(a.tokens, b.tokens) >= len(SYSTEM_PROMPTS[0])


def test_shared_prefixes_end_mid_page() -> None:
    page = 16
    lens = {r.prompt_len for r in synthetic_chat(4, 8, 3)}
    assert sum(n % page != 0 for n in lens) > len(lens) // 2


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="turns"):
        synthetic_chat(0, 2, 0)
    with pytest.raises(ValueError, match="n_system_prompts"):
        synthetic_chat(0, 2, 1, n_system_prompts=99)
    with pytest.raises(ValueError, match="reply_len"):
        synthetic_chat(0, 2, 1, reply_len=(3, 4))
    with pytest.raises(ValueError, match="output_len"):
        Request("x", 0.0, (1,), -1)
    assert synthetic_chat(0, 0, 3) == []
