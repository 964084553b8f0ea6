"""Typed requests: tokens with a token type per span, a session, a task and an arrival order.

A typed request carries the prompt to look up and prefill and the output it decodes, each with
its type spans (half-open token ranges, contiguous, covering the whole run)::

    tokens   [ system ........ | user ... | response ..... | user .. ]
    spans    (0, 40, "system") (40, 52, "user") (52, 80, "response") (80, 89, "user")
    output   [ reasoning ......... | response ..... ]
    spans    (0, 120, "reasoning") (120, 150, "response")

An untyped request (a trace line) has no spans at all.  Generators draw lengths in real tokens
and emit one token per ``token_scale`` real tokens, so a CPU replay stays small while a cost model
(``real_tokens``) can still charge the full length.  Tokens are 30-bit ids minted from a named
content key, so the same content (a shared system prompt, a retrieved document) always yields
the same tokens and different contents never share a page.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

TokenSpan = tuple[int, int, str]

#: The token types the generators emit (an engine may use any other tag).
TOKEN_TYPES: tuple[str, ...] = ("system", "user", "tool", "response", "reasoning", "document")


class WorkloadError(ValueError):
    """A typed request or workload that breaks its own invariants."""


def check_spans(spans: Sequence[TokenSpan], length: int, what: str) -> None:
    """Raise WorkloadError unless ``spans`` are contiguous, non-empty and cover ``[0, length)``
    (no spans at all is allowed: the run is untyped)."""
    if not spans:
        return
    pos = 0
    for start, end, name in spans:
        if start != pos or end <= start or not isinstance(name, str) or not name:
            raise WorkloadError(f"{what}: span ({start}, {end}, {name!r}) does not continue at {pos}")
        pos = end
    if pos != length:
        raise WorkloadError(f"{what}: spans cover {pos} of {length} tokens")


@dataclass(frozen=True)
class TypedRequest:
    """One request of a typed workload.

    ``order``: arrival order (the replay order, 0-based); ``session``: the conversation or agent
    episode it belongs to; ``task``: the kind of traffic (``"chat"``, ``"agent"``, ...);
    ``tokens``/``spans``: the prompt; ``output``/``output_spans``: what the request decodes.
    """

    request_id: str
    order: int
    arrival_ms: float
    session: str
    task: str
    tokens: tuple[int, ...]
    spans: tuple[TokenSpan, ...]
    output: tuple[int, ...]
    output_spans: tuple[TokenSpan, ...]

    def __post_init__(self) -> None:
        if self.order < 0 or not math.isfinite(self.arrival_ms) or self.arrival_ms < 0:
            raise WorkloadError(f"{self.request_id}: bad order {self.order} or arrival {self.arrival_ms}")
        check_spans(self.spans, len(self.tokens), f"{self.request_id} prompt")
        check_spans(self.output_spans, len(self.output), f"{self.request_id} output")

    def types_between(self, start: int, end: int) -> tuple[TokenSpan, ...]:
        """The prompt's spans clipped to ``[start, end)`` and shifted to start at 0 (what an
        ``append`` of ``tokens[start:end]`` passes as ``types``)."""
        return clip_spans(self.spans, start, end)


def clip_spans(spans: Iterable[TokenSpan], start: int, end: int) -> tuple[TokenSpan, ...]:
    """``spans`` restricted to ``[start, end)``, shifted so that ``start`` becomes 0."""
    out = []
    for s, e, name in spans:
        lo, hi = max(s, start), min(e, end)
        if lo < hi:
            out.append((lo - start, hi - start, name))
    return tuple(out)


@dataclass(frozen=True)
class TypedWorkload:
    """Requests in arrival order, and what one emitted token stands for.

    ``phases``: the orders at which the workload's phases start (empty: one phase).
    """

    name: str
    requests: tuple[TypedRequest, ...]
    token_scale: int
    description: str = ""
    phases: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.token_scale < 1:
            raise WorkloadError(f"{self.name}: token_scale must be >= 1, got {self.token_scale}")
        for i, req in enumerate(self.requests):
            if req.order != i:
                raise WorkloadError(f"{self.name}: request {req.request_id} has order {req.order}, expected {i}")
        if list(self.phases) != sorted(set(self.phases)) or any(not 0 <= p <= len(self.requests)
                                                                 for p in self.phases):
            raise WorkloadError(f"{self.name}: phases {self.phases} are not increasing orders")

    def real_tokens(self, tokens: int) -> int:
        """Real tokens that ``tokens`` emitted tokens stand for."""
        return tokens * self.token_scale


class Segments:
    """A run of typed segments being assembled into tokens and spans."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.spans: list[TokenSpan] = []

    def add(self, kind: str, tokens: Sequence[int]) -> None:
        """Append ``tokens`` typed ``kind`` (merged with the previous span when the type repeats)."""
        if not tokens:
            return
        start = len(self.tokens)
        self.tokens.extend(tokens)
        if self.spans and self.spans[-1][2] == kind:
            self.spans[-1] = (self.spans[-1][0], len(self.tokens), kind)
        else:
            self.spans.append((start, len(self.tokens), kind))

    def extend(self, other: Segments) -> None:
        """Append every segment of ``other``."""
        base = len(self.tokens)
        for s, e, kind in other.spans:
            self.add(kind, other.tokens[s:e])
        assert len(self.tokens) == base + len(other.tokens)

    def copy(self) -> Segments:
        """An independent copy."""
        out = Segments()
        out.tokens = list(self.tokens)
        out.spans = list(self.spans)
        return out

    def frozen(self) -> tuple[tuple[int, ...], tuple[TokenSpan, ...]]:
        """(tokens, spans) as tuples."""
        return tuple(self.tokens), tuple(self.spans)


def content(key: str, n: int) -> tuple[int, ...]:
    """``n`` tokens of the content named ``key`` (30-bit ids; a shorter run of the same key is a
    prefix of a longer one)."""
    rng = random.Random(key)
    return tuple(rng.getrandbits(30) for _ in range(n))


def lognormal_tokens(rng: random.Random, median: float, sigma: float, scale: int, lo: int = 1,
                     hi: int | None = None) -> int:
    """Emitted tokens for a length drawn log-normal (real-token ``median``, log-space ``sigma``),
    clipped to ``[lo, hi]`` real tokens and divided by ``scale`` (at least one token)."""
    real = rng.lognormvariate(math.log(median), sigma)
    real = max(float(lo), real if hi is None else min(float(hi), real))
    return max(1, round(real / scale))


def geometric(rng: random.Random, mean: float, cap: int) -> int:
    """A count >= 1 with the given mean (geometric), at most ``cap``."""
    if mean <= 1:
        return 1
    p = 1.0 / mean
    n = 1
    while n < cap and rng.random() > p:
        n += 1
    return n


def poisson_starts(rng: random.Random, count: int, start_ms: float, span_ms: float) -> Iterator[tuple[int, float]]:
    """``(i, arrival_ms)`` for ``count`` arrivals of a Poisson process at ``count / span_ms`` from
    ``start_ms`` (all at ``start_ms`` when the span is 0); each gap is drawn from ``rng`` as the loop
    reaches it, so the caller's own draws interleave with them in order."""
    rate = count / span_ms if span_ms > 0 else 0.0
    t = start_ms
    for i in range(count):
        t += rng.expovariate(rate) if rate > 0 else 0.0
        yield i, t


def zipf_choice(rng: random.Random, n: int, s: float) -> int:
    """An index in ``0..n-1`` with probability proportional to ``1 / (i + 1) ** s``."""
    weights = [1.0 / (i + 1) ** s for i in range(n)]
    return rng.choices(range(n), weights=weights)[0]


@dataclass
class Draft:
    """A request before its arrival order is known (generators sort drafts by arrival)."""

    arrival_ms: float
    request_id: str
    session: str
    task: str
    prompt: Segments
    output: Segments


def finish(name: str, drafts: list[Draft], token_scale: int, description: str) -> TypedWorkload:
    """Sort drafts by (arrival, id), number them, freeze them into a workload."""
    drafts.sort(key=lambda d: (d.arrival_ms, d.request_id))
    requests = []
    for i, d in enumerate(drafts):
        toks, spans = d.prompt.frozen()
        out, ospans = d.output.frozen()
        requests.append(TypedRequest(d.request_id, i, round(d.arrival_ms, 3), d.session, d.task, toks, spans,
                                     out, ospans))
    return TypedWorkload(name, tuple(requests), token_scale, description)
