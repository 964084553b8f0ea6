"""Decode through the cache: greedy tokens one forward each, across a page boundary (the page the
decode completes is compressed before the next token reads it)."""

from __future__ import annotations

import random

import pytest
from eng_helpers import TOL, C, make_engine

from morphcache.model import HybridModel, golden_logits


@pytest.mark.parametrize("ops", ["triton", "reference"])
def test_decode_across_a_page_boundary(model: HybridModel, ops: str) -> None:
    engine = make_engine(model, None, ops=ops)
    rng = random.Random(5)
    prompt = [rng.randrange(256) for _ in range(2 * C - 2)]
    result = engine.serve(prompt, decode=4)
    assert len(result.tokens) == 2 * C + 2 and result.logits.shape[0] == 2 * C + 2
    assert result.report.decoded == 4
    gold = golden_logits(model, list(result.tokens))
    assert float((result.logits - gold).abs().max()) <= TOL
    for i, tok in enumerate(result.tokens[len(prompt):]):  # greedy: each token is the argmax before it
        assert tok == int(gold[len(prompt) - 1 + i].argmax())
    again = engine.serve(list(result.tokens) + [1])  # the decoded page is cached and readable
    assert again.start == 2 * C and engine.golden_diff(again) <= TOL
    engine.check_integrity()
    engine.close()
