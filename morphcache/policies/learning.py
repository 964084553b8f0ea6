"""Online estimators of SAECache: a log-normal timing fit and the reuse model its eviction feedback
trains.

Reuse model.  The probability that an evicted page is wanted again within its ghost horizon::

    P(page) = w[queue] * omega[type] * (1 + depth) ** -beta * f        clipped to [0.02, 0.98]

``omega[type]`` is the weight of the page's *binding* type (the one with the smallest weight among
those it holds), ``w[queue]`` the weight of its queue, ``beta`` the position decay power and ``f``
the product of the fixed features the caller supplies (a frequency factor, a timing probability).
Each eviction outcome ``r`` (1: the page came back, 0: its ghost expired) updates:

* ``omega[type]`` and ``w[queue]``: observed over expected returns, from exponentially decayed
  sums (an online iterative proportional fit of the product model)::

      omega[t] = (sum r + 2 * 0.5) / (sum w[q] (1+d)^-beta f + 2)      over outcomes of type t
      w[q]     = (sum r + 2 * 1.0) / (sum omega[t] (1+d)^-beta f + 2)  over outcomes of queue q

* ``beta``: one gradient step on the Bernoulli log-likelihood, with the log-depth centred on its
  running mean (so the decay does not absorb the overall return rate) and a small, bounded step;
* the sums' memory (a meta-parameter, 200 to 5,000 outcomes): it shortens while the running mean
  residual ``r - P`` stays beyond three times its noise level (the model lags a shift) and
  lengthens slowly otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

P_MIN, P_MAX = 0.02, 0.98


class OnlineLogNormal:
    """An exponentially weighted log-normal fit of positive gaps (mean and variance of ln gap).

    ``weight`` is the effective sample memory: the newest gap counts ``1 / weight`` of the fit once
    ``weight`` gaps were seen (the first gaps are averaged equally).
    """

    __slots__ = ("mu", "var", "n", "weight")

    def __init__(self, mu: float, sigma: float, weight: float = 200.0) -> None:
        self.mu = mu
        self.var = sigma * sigma
        self.n = 0
        self.weight = weight

    def observe(self, gap: float) -> None:
        """Fold one gap (clamped to >= 1) into the fit."""
        x = math.log(max(gap, 1.0))
        self.n += 1
        a = 1.0 / min(self.n, self.weight)
        d = x - self.mu
        self.mu += a * d
        self.var = (1 - a) * (self.var + a * d * d)

    @property
    def sigma(self) -> float:
        """Standard deviation of ln gap (at least 0.05)."""
        return max(0.05, math.sqrt(self.var))

    def quantile(self, z: float) -> float:
        """The gap at z standard deviations: ``exp(mu + z * sigma)``."""
        return math.exp(self.mu + z * self.sigma)

    def cdf(self, gap: float) -> float:
        """The fitted probability that a gap is at most ``gap``."""
        return 0.5 * math.erfc((self.mu - math.log(max(gap, 1e-9))) / (self.sigma * math.sqrt(2.0)))

    def within(self, age: float, span: float) -> float:
        """The probability that a gap ends within ``(age, age + span]`` given it lasted ``age``."""
        alive = 1.0 - self.cdf(age) if age > 0 else 1.0
        if alive < 1e-9:
            return 0.0
        return max(0.0, self.cdf(age + span) - (1.0 - alive)) / alive


@dataclass
class Outcome:
    """One eviction's features and what happened to the page."""

    queue: str
    kind: str  # binding token type ("" when untyped)
    depth: int
    factor: float  # the fixed features' product at eviction time
    returned: bool


class _Ratio:
    """Decayed sums of returns and expected returns for one type or queue."""

    __slots__ = ("returns", "expected", "at")

    def __init__(self) -> None:
        self.returns = 0.0
        self.expected = 0.0
        self.at = 0  # outcome count when last decayed


class ReuseModel:
    """``P(page)`` of the module docstring, trained online by ``learn``."""

    PRIOR = 2.0

    def __init__(self, omega0: float = 0.5, memory: float = 500.0) -> None:
        self.omega0 = omega0
        self.types: dict[str, _Ratio] = {}
        self.queues: dict[str, _Ratio] = {}
        self.beta = 0.0
        self.depth_mean = 0.0
        self.memory = memory
        self.residual = 0.0
        self.outcomes = 0
        self.returns = 0

    def _ratio(self, table: dict[str, _Ratio], name: str) -> _Ratio:
        ratio = table.get(name)
        if ratio is None:
            ratio = table[name] = _Ratio()
            ratio.at = self.outcomes
        return ratio

    def omega(self, kind: str) -> float:
        """Weight of a token type."""
        r = self.types.get(kind)
        if r is None:
            return self.omega0
        return min(50.0, max(0.005, (r.returns + self.PRIOR * self.omega0) / (r.expected + self.PRIOR)))

    def weight(self, queue: str) -> float:
        """Weight of a queue."""
        r = self.queues.get(queue)
        if r is None:
            return 1.0
        return min(20.0, max(0.05, (r.returns + self.PRIOR) / (r.expected + self.PRIOR)))

    def binding(self, types: frozenset[str]) -> str:
        """The type among ``types`` with the smallest weight ("" for an untyped page)."""
        if not types:
            return ""
        if len(types) == 1:
            return next(iter(types))
        return min(sorted(types), key=self.omega)

    def raw(self, queue: str, kind: str, depth: int, factor: float = 1.0) -> float:
        """``P`` for these features before clipping."""
        return self.weight(queue) * self.omega(kind) * (1.0 + depth) ** -self.beta * factor

    def probability(self, queue: str, kind: str, depth: int, factor: float = 1.0) -> float:
        """``P`` for these features."""
        return min(P_MAX, max(P_MIN, self.raw(queue, kind, depth, factor)))

    def learn(self, o: Outcome) -> None:
        """Fold one eviction outcome into the model (see the module docstring)."""
        base = (1.0 + o.depth) ** -self.beta * o.factor
        omega, weight = self.omega(o.kind), self.weight(o.queue)
        p = min(P_MAX, max(P_MIN, omega * weight * base))
        r = 1.0 if o.returned else 0.0
        self.outcomes += 1
        self.returns += int(o.returned)
        keep = 1.0 - 1.0 / self.memory
        for table, name, expected in ((self.types, o.kind, weight * base), (self.queues, o.queue, omega * base)):
            ratio = self._ratio(table, name)
            fade = keep ** (self.outcomes - ratio.at)
            ratio.returns = ratio.returns * fade + r
            ratio.expected = ratio.expected * fade + expected
            ratio.at = self.outcomes
        x = math.log1p(o.depth)
        self.depth_mean += 0.01 * (x - self.depth_mean)
        step = -0.005 * (r - p) / (1.0 - p) * (x - self.depth_mean)
        self.beta = min(1.5, max(0.0, self.beta + max(-0.05, min(0.05, step))))
        self.residual += 0.02 * (r - p - self.residual)
        noise = 0.1 * math.sqrt(p * (1.0 - p))  # standard deviation of that running mean for a calibrated P
        self.memory = max(200.0, min(5000.0, self.memory * (0.98 if abs(self.residual) > 3 * noise else 1.005)))
