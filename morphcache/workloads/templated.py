"""Templated single-turn requests: few-shot prompts and retrieval-augmented (RAG) prompts.

Every request is its own session (one turn, never continued); it shares a prefix with other
requests only through the template it was rendered from::

    few-shot   [template: instructions + k worked examples ][question]     output = [answer]
    RAG        [template: instructions ][document][document][question]     output = [answer]

What is reused, and why:

* a template: by every request rendered from it (structural reuse), with a skewed popularity;
* a retrieved document: only behind the same template and the same earlier documents (prefix
  reuse), so popular documents of a popular template are reused, the rest rarely;
* the question and the answer: never (single turn).

Published facts used: prompts of real LLM applications repeat long parts (instructions, worked
examples, tool descriptions, long documents) across requests (Preble, Srivatsa et al., ICLR 2025,
a study of five workloads); document retrievals are skewed toward popular documents (RAGCache,
Jin et al., 2024).  Assumptions: 32 few-shot templates with Zipf(1) popularity, log-normal length
median 1,500 real tokens (sigma 0.5); 4 RAG instructions (median 300) over a corpus of 400 chunks
with Zipf(0.8) popularity, chunk median 700 (sigma 0.4), one or two chunks per request;
questions median 60 (sigma 0.8), answers median 120 (sigma 0.8); Poisson arrivals.
"""

from __future__ import annotations

import random

from morphcache.workloads.typed import (
    Draft,
    Segments,
    TypedWorkload,
    content,
    finish,
    lognormal_tokens,
    poisson_starts,
    zipf_choice,
)


def templated_drafts(seed: int, requests: int, *, task: str = "template", rag_share: float = 0.5,
                     token_scale: int = 16, start_ms: float = 0.0, span_ms: float = 600_000.0,
                     templates: int = 32, corpus: int = 400) -> list[Draft]:
    """Drafts of ``requests`` single-turn requests arriving within ``[start_ms, start_ms + span_ms)``."""
    if not 0.0 <= rag_share <= 1.0:
        raise ValueError(f"rag_share must be in [0, 1], got {rag_share}")
    rng = random.Random(f"{task}:{seed}")
    shot_len = [lognormal_tokens(random.Random(f"shot-len:{task}:{k}"), 1500.0, 0.5, token_scale)
                for k in range(templates)]
    rag_len = [lognormal_tokens(random.Random(f"rag-len:{task}:{k}"), 300.0, 0.5, token_scale) for k in range(4)]
    doc_len = [lognormal_tokens(random.Random(f"doc-len:{task}:{d}"), 700.0, 0.4, token_scale) for d in range(corpus)]
    drafts: list[Draft] = []
    for r, t in poisson_starts(rng, requests, start_ms, span_ms):
        rid = f"{task}{seed}-r{r}"
        prompt = Segments()
        if rng.random() < rag_share:
            k = zipf_choice(rng, 4, 1.0)
            prompt.add("system", content(f"rag:{task}:{k}", rag_len[k]))
            for _ in range(1 + (rng.random() < 0.5)):
                d = zipf_choice(rng, corpus, 0.8)
                prompt.add("document", content(f"doc:{task}:{d}", doc_len[d]))
        else:
            k = zipf_choice(rng, templates, 1.0)
            prompt.add("system", content(f"shot:{task}:{k}", shot_len[k]))
        prompt.add("user", content(f"{rid}:question", lognormal_tokens(rng, 60.0, 0.8, token_scale)))
        output = Segments()
        output.add("response", content(f"{rid}:answer", lognormal_tokens(rng, 120.0, 0.8, token_scale)))
        drafts.append(Draft(t, rid, rid, task, prompt, output))
    return drafts


def templated(seed: int, requests: int = 1200, *, token_scale: int = 16, span_ms: float = 600_000.0,
              rag_share: float = 0.5) -> TypedWorkload:
    """Templated single-turn traffic (see the module docstring)."""
    drafts = templated_drafts(seed, requests, token_scale=token_scale, span_ms=span_ms, rag_share=rag_share)
    return finish("templated", drafts, token_scale, "few-shot and RAG single-turn requests")
