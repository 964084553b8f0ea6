"""Mixtures of the typed generators, and a mixture whose composition shifts mid-run.

A mixture interleaves independent generators over one time window (each keeps its own sessions
and its own seed); requests are ordered by arrival.  The shifting mixture runs two windows back to
back with different compositions; sessions started in the first window may finish in the second::

    time     0 ............................ T ............................ 2T
    phase 1  chat-heavy: conversations + templated requests
    phase 2  reasoning-heavy: chain-of-thought chat + agent episodes (+ a little chat)

The shift changes which token types are worth keeping: replies are reused by the next chat turn
in phase 1, while in phase 2 most outputs (reasoning and the replies behind it) are never read
again and tool outputs live only as long as their episode.
"""

from __future__ import annotations

from morphcache.workloads.agentic import agent_drafts
from morphcache.workloads.conversations import conversation_drafts
from morphcache.workloads.templated import templated_drafts
from morphcache.workloads.typed import Draft, TypedWorkload, WorkloadError, finish

MINUTE_MS = 60_000.0


def mixed_drafts(seed: int, *, chat: int = 0, reasoning: int = 0, agent: int = 0, template: int = 0,
                 token_scale: int = 16, start_ms: float = 0.0, span_ms: float = 10 * MINUTE_MS) -> list[Draft]:
    """Drafts of ``chat`` and ``reasoning`` conversations, ``agent`` episodes and ``template``
    single-turn requests, all starting within ``[start_ms, start_ms + span_ms)``."""
    ts, t0, span = token_scale, start_ms, span_ms
    drafts: list[Draft] = []
    if chat:
        drafts += conversation_drafts(seed, chat, task="chat", token_scale=ts, start_ms=t0, span_ms=span)
    if reasoning:
        drafts += conversation_drafts(seed, reasoning, task="reasoning", reasoning=True, token_scale=ts,
                                      start_ms=t0, span_ms=span)
    if agent:
        drafts += agent_drafts(seed, agent, task="agent", token_scale=ts, start_ms=t0, span_ms=span)
    if template:
        drafts += templated_drafts(seed, template, task="template", token_scale=ts, start_ms=t0, span_ms=span)
    return drafts


def typed_mixture(seed: int, *, size: float = 1.0, token_scale: int = 16) -> TypedWorkload:
    """All four kinds of traffic at once over ten minutes (``size`` scales every count)."""
    counts = dict(chat=round(120 * size), reasoning=round(80 * size), agent=round(16 * size),
                  template=round(300 * size))
    drafts = mixed_drafts(seed, token_scale=token_scale, **counts)
    return finish("mixed", drafts, token_scale, "chat + reasoning + agent + templated, interleaved")


def shifting_mixture(seed: int, *, size: float = 1.0, token_scale: int = 16) -> TypedWorkload:
    """Ten minutes of chat-heavy traffic, then ten minutes of reasoning-heavy traffic."""
    span = 10 * MINUTE_MS
    first = mixed_drafts(seed, chat=round(200 * size), template=round(300 * size), token_scale=token_scale,
                         span_ms=span)
    second = mixed_drafts(seed + 1, reasoning=round(150 * size), agent=round(20 * size), chat=round(30 * size),
                          token_scale=token_scale, start_ms=span, span_ms=span)
    for d in second:  # phase-2 generators reuse task names; keep ids and sessions distinct
        d.request_id = "p2-" + d.request_id
        d.session = "p2-" + d.session
    work = finish("shifting", first + second, token_scale, "chat-heavy, then reasoning-heavy")
    boundary = next((r.order for r in work.requests if r.arrival_ms >= span), len(work.requests))
    return TypedWorkload(work.name, work.requests, work.token_scale, work.description, phases=(0, boundary))


def phase_of(work: TypedWorkload, order: int) -> int:
    """Index of the phase request ``order`` belongs to (0 for a workload without phases)."""
    if order < 0 or order >= len(work.requests):
        raise WorkloadError(f"{work.name}: no request with order {order}")
    phase = 0
    for i, start in enumerate(work.phases):
        if order >= start:
            phase = i
    return phase
