"""``morphcache simulate``: the chat and trace workloads end to end, text and JSON reports, bad
arguments.  The kernels' plain-torch references keep these runs short (the Triton path is covered by
the differential tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from morphcache.cli import main
from morphcache.engine.trace_sample import conversation_lines, sample_trace
from morphcache.simulate import simulate_main

FAST = ["--ops", "reference", "--no-progress", "--decode", "1"]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = simulate_main(argv)
    return code, capsys.readouterr().out


def test_chat_report_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, ["--conversations", "3", "--turns", "2", "--gpu-pages", "12", "--host-pages", "2",
                              "--json", *FAST])
    assert code == 0
    rep = json.loads(out)
    assert rep["requests"] == 6 and rep["sampled"] == 6 and rep["within_tolerance"]
    assert rep["max_abs_diff"] <= rep["tolerance"] == 1e-4
    assert 0 < rep["effective_hit_rate"] <= rep["nominal_hit_rate"] <= 1
    assert rep["reused_tokens"] >= rep["effective_tokens"]
    assert rep["integrity_checks"] == 6
    assert rep["tier_events"]["offload"] > 0, "a small GPU pool must offload"
    assert set(rep) >= {"gap_by_object", "recoveries_by_path", "recomputed_tokens", "prefetched_bytes",
                        "bytes_moved", "wall_s", "notes"}


def test_chat_report_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, ["--conversations", "1", "--turns", "2", "--sample-every", "2", *FAST])
    assert code == 0
    for line in ("requests served", "nominal hit rate", "effective hit rate", "gap by missing object",
                 "recoveries by path", "tokens recomputed", "bytes prefetched", "prefill saved vs no cache",
                 "max |logit - golden|"):
        assert line in out, line
    assert "over 1 sampled requests" in out


def _trace(tmp: Path) -> Path:
    lines = [
        {"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [0, 1, 2]},
        {"timestamp": 5, "input_length": 700, "output_length": 10, "hash_ids": [0, 7]},
        {"timestamp": 9, "input_length": 2000, "output_length": 10, "hash_ids": [0, 1, 2, 3]},
        {"timestamp": 12, "input_length": 1000, "output_length": 10, "hash_ids": [0, 8]},
        {"timestamp": 15, "input_length": 2500, "output_length": 10, "hash_ids": [0, 1, 2, 3, 4]},
    ]
    path = tmp / "trace.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def test_trace_sampling_follows_conversations(tmp_path: Path) -> None:
    path = _trace(tmp_path)
    assert conversation_lines(path, limit=10, max_blocks=8) == [1, 3, 5]
    assert conversation_lines(path, limit=2, max_blocks=8) == [1, 3]
    s = sample_trace(path, limit=3, block_tokens=8, max_blocks=3)
    assert [len(r.tokens) for r in s.requests] == [24, 24, 24]
    assert s.requests[0].tokens == s.requests[1].tokens  # cut to 3 blocks: the same prefix


def test_trace_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, ["--trace", str(_trace(tmp_path)), "--limit", "3", "--block-tokens", "12",
                              "--json", *FAST])
    assert code == 0
    rep = json.loads(out)
    assert rep["requests"] == 3 and rep["nominal_tokens"] > 0 and rep["within_tolerance"]
    assert "trace lines replayed: 1, 3, 5" in rep["notes"]


def test_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--turns", "0"]) == 2
    assert capsys.readouterr().err == "morphcache simulate: --turns: must be an integer >= 1, got 0\n"
    assert main(["simulate", "--trace", str(tmp_path / "missing.jsonl")]) == 2
    assert "--trace: no trace file at" in capsys.readouterr().err


def test_requests_the_pool_cannot_hold_are_refused_and_counted(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, ["--conversations", "1", "--turns", "2", "--gpu-pages", "3", "--json", *FAST])
    rep = json.loads(out)
    assert code == 0 and rep["refused"] and rep["requests"] + len(rep["refused"]) == 2
    assert rep["integrity_checks"] == 2


GDN = ["--model", "gdn-hybrid", "--conversations", "2", "--turns", "2", "--gpu-pages", "12", "--host-pages", "2",
       *FAST]


def test_gdn_hybrid_exact_paths(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, [*GDN, "--json"])
    rep = json.loads(out)
    assert code == 0 and rep["model"] == "gdn-hybrid" and rep["linear_layers"] == 6
    assert rep["sampled"] == rep["requests"] == 4 and rep["within_tolerance"] and rep["max_abs_diff"] <= 1e-4
    assert rep["state_paths"].get("recompute", 0) >= 1 and rep["linear_tokens"] > 0
    assert rep["checkpoint_tokens"] > 0  # exact hits started from the runtime's checkpoints
    assert rep["approximate"] == [] and rep["tail_replay"] is None
    assert rep["token_layers_saved"] == rep["reused_tokens"] * 8 - rep["linear_token_layers"]
    assert rep["linear_token_layers"] == 7 * rep["linear_tokens"]  # layers 0 .. 6 rerun over every hit
    assert rep["tier_events"]["offload"] > 0


def test_gdn_hybrid_unsafe_mode_drifts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, [*GDN, "--unsafe", "--json"])
    rep = json.loads(out)
    assert code == 0 and rep["drifted"] > 0 and rep["max_abs_diff"] > 1e-2
    assert rep["state_paths"].get("trusted", 0) >= 1


def test_gdn_hybrid_tail_replay_reports_approximate_requests_apart(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(capsys, [*GDN, "--tail-replay", "0.05", "--sample-every", "0", "--json"])
    rep = json.loads(out)
    assert code == 0 and rep["tail_replay"] == 0.05
    approx = rep["approximate"]
    assert approx and all(a["budget"] == 0.05 and 0 < a["replayed"] < a["hit"] for a in approx)
    runtime = rep["runtime_state"]  # the runtime counted them: one opt-in per request, one replay_tail each
    assert runtime["opt_ins"] == rep["requests"] and runtime["replays"] == len(approx)
    assert runtime["replayed_tokens"] == rep["replayed_tokens"] == sum(a["replayed"] for a in approx)
    assert runtime["approximate_tokens"] == sum(a["hit"] for a in approx)
    assert runtime["approximate_effective_hit_rate"] > 0
    assert all(a["max_abs_diff"] > 0 and 0 <= a["top1_agreement"] <= 1 for a in approx)  # measured, unsampled
    assert rep["state_paths"]["tail-replay"] == len(approx)
    assert rep["sampled"] == 0  # nothing exact was sampled: approximate requests never count as exact
    code, text = _run(capsys, [*GDN, "--tail-replay", "0.05", "--weights", "trained"])
    assert code == 0 and "approximate requests" in text and "top-1 agreement" in text and "never counted" in text
    assert "token-layers" in text
