"""Lookup answers and recovery plans (frozen values handed to the engine).

::

    lookup(tokens) -> Miss                      nothing reusable
                   -> NeedsRecovery(plan)       a better position exists if the plan is carried out
                   -> Ready(lease)              the prefix is readable now, pinned by the lease

A plan targets one position (``target``, usually the nominal hit).  Every (page, object) that is
needed there and not ready gets exactly one path, chosen by evaluating the spec's recovery
conditions; zero or several true conditions raise DiversionError (rule 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from morphcache.spec.interp import Compiled

from .errors import DiversionError
from .lease import Lease
from .statepath import StatePath


@dataclass(frozen=True)
class Assignment:
    """Object ``obj`` of page ``page`` (block ``block``) recovers along ``path``."""

    page: int
    block: int
    obj: str
    path: str


class Routes(NamedTuple):
    """What ``recover`` carries out of a plan: ``pages_on("prefetch")``, ``pages_on("recompute")``, and
    the number of assignments by path (in the order the paths first appear)."""

    prefetch: tuple[int, ...]
    recompute: tuple[int, ...]
    done: Mapping[str, int]


def routes_of(assignments: tuple[Assignment, ...]) -> Routes:
    """``Routes`` of ``assignments`` (a plan's, in block order) in one pass."""
    done: dict[str, int] = {}
    pages: dict[str, dict[int, int]] = {}
    for a in assignments:
        path = a.path
        done[path] = done.get(path, 0) + 1
        seen = pages.get(path)
        if seen is None:
            pages[path] = {a.page: a.block}
        elif a.page not in seen:
            seen[a.page] = a.block
    prefetch, recompute = pages.get("prefetch", {}), pages.get("recompute", {})
    return Routes(tuple(sorted(prefetch, key=prefetch.__getitem__)),
                  tuple(sorted(recompute, key=recompute.__getitem__)), done)


@dataclass(frozen=True)
class RecoveryPlan:
    """How to make the prefix readable up to ``target`` and what it costs.

    ``recompute_tokens``: tokens of the pages with an object on the recompute path (prefill work);
    ``bytes_to_move``: payload bytes of the pages to prefetch; ``missing``: per object, how many
    needed pages are not ready.  With recurrent state (``spec/gdn_hybrid.yaml``): ``state`` is how the
    reader's recurrent state at ``target`` is made (exact or approximate, ``statepath.py``) and
    ``state_assignments`` the checkpoint objects' paths (carried out by the recurrent part, not as
    page recoveries).
    """

    nominal: int
    effective: int
    target: int
    pages: tuple[int, ...]
    assignments: tuple[Assignment, ...]
    in_place: int
    recompute_tokens: int
    bytes_to_move: int
    pages_to_prefetch: int
    pages_to_compress: int
    missing: Mapping[str, int] = field(default_factory=dict)
    state: StatePath | None = None
    state_assignments: tuple[Assignment, ...] = ()

    @cached_property
    def routes(self) -> Routes:
        """``routes_of(assignments)``, made on first use and kept (a lookup counts its plan's paths off
        it; the recovery reads it again)."""
        return routes_of(self.assignments)

    def by_path(self) -> dict[str, list[Assignment]]:
        """Assignments grouped by path."""
        out: dict[str, list[Assignment]] = {}
        for a in self.assignments:
            out.setdefault(a.path, []).append(a)
        return out

    def pages_on(self, path: str) -> tuple[int, ...]:
        """Distinct pages with at least one object on ``path``, in block order."""
        seen: dict[int, int] = {}
        for a in self.assignments:
            if a.path == path:
                seen.setdefault(a.page, a.block)
        return tuple(sorted(seen, key=lambda pid: seen[pid]))


@dataclass(frozen=True)
class Probe:
    """What a lookup would find, without pinning or counting anything: the nominal hit, the effective
    hit and the objects that keep the nominal position from being readable."""

    nominal: int
    effective: int
    blocking: frozenset[str]


@dataclass(frozen=True)
class Miss:
    """Nothing of the request is reusable (``nominal`` is the hash-chain hit, possibly > 0 when
    recovering it would cost as much as a prefill)."""

    nominal: int = 0
    effective: int = 0


@dataclass(frozen=True)
class NeedsRecovery:
    """A hit that needs recovery first; ``plan.effective`` tokens are readable right now."""

    plan: RecoveryPlan


@dataclass(frozen=True)
class Ready:
    """A readable hit of ``lease.tokens`` tokens, pinned by ``lease``; ``state``: how the recurrent
    state at the hit is made (None for a spec without recurrent state), ``state.exact`` False for an
    approximate tail replay."""

    lease: Lease
    nominal: int
    state: StatePath | None = None


LookupResult = Miss | NeedsRecovery | Ready


def choose_path(obj: str, page: int, block: int, conditions: Mapping[str, Compiled],
                names: Mapping[str, Any], arrays: Mapping[str, Any]) -> str:
    """The one recovery path whose spec condition holds for ``obj`` of the page; DiversionError
    otherwise."""
    holding = [path for path, fn in conditions.items() if fn(names, arrays)]
    if len(holding) != 1:
        what = "no recovery path" if not holding else f"several recovery paths ({', '.join(holding)})"
        raise DiversionError(f"{obj} of page {page} (block {block}) has {what}; paths: "
                             f"{', '.join(conditions) or 'none declared'}")
    return holding[0]


@dataclass(frozen=True)
class RecoveryReport:
    """What ``recover`` did: paths carried out per page, and what was refused (with the reason)."""

    done: Mapping[str, int]
    failed: tuple[tuple[int, str], ...]
    prefetched: int
