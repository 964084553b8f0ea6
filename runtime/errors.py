"""Exceptions of the runtime: one family, every message names what was refused and why.

::

    MorphcacheError
     +-- ConfigError              bad RuntimeConfig, or a spec the runtime cannot drive
     +-- BadInputError            tokens / lengths / ids of the wrong type or range
     +-- UnknownSequenceError     no live sequence with that id
     +-- DuplicateSequenceError   a sequence id registered twice
     +-- UnknownPageError         no live page with that id
     +-- GuardRefused             a spec guard (or source state, or domain bound) said no
     |    +-- PinnedPageError     ... because the page is pinned by a lease
     |    +-- TopologyError       ... because a batch is captured for graph replay
     |    +-- DomainError         ... because a result would leave a variable's declared bounds
     |    +-- ViewConflictError   ... because two sequences sharing the page disagree on the effect
     +-- LeaseError
     |    +-- StaleLeaseError     the read-time re-validation failed (state or generation changed)
     |    +-- LeaseReleasedError  the lease was already released
     |    +-- ForeignLeaseError   the lease belongs to another manager
     +-- CapacityError            no GPU / host / disk slot can be freed
     +-- TierError                a tier store cannot be used (e.g. unwritable disk directory)
     +-- DiversionError           a non-ready object has zero or several recovery paths
     +-- IntegrityError           check_integrity() found values that disagree
"""

from __future__ import annotations

from collections.abc import Sequence


class MorphcacheError(Exception):
    """Base class of every error the runtime raises on purpose."""


class ConfigError(MorphcacheError, ValueError):
    """The configuration (or the spec given to the runtime) cannot be used."""


class BadInputError(MorphcacheError, ValueError):
    """An argument has the wrong type or is out of range; nothing was changed."""


class UnknownSequenceError(MorphcacheError, LookupError):
    """No live sequence has this id."""


class DuplicateSequenceError(MorphcacheError, ValueError):
    """A sequence with this id is already registered."""


class UnknownPageError(MorphcacheError, LookupError):
    """No live page has this id."""


class GuardRefused(MorphcacheError):
    """A state change was refused by the spec: wrong source state, a false guard or a domain bound.

    ``event`` is the spec event, ``page`` the physical page id (None for a system event; for an
    event over no page whose refused conjunct quantifies over pages, the first page it fails for),
    ``block`` the page's block index in the view where it failed, ``view`` names that view,
    ``guard`` the event's whole guard and ``failed`` the first conjunct that was false (both rendered
    from the spec's IR).
    """

    def __init__(
        self,
        event: str,
        page: int | None,
        block: int | None,
        view: str,
        guard: str,
        failed: str,
        detail: str = "",
    ) -> None:
        self.event = event
        self.page = page
        self.block = block
        self.view = view
        self.guard = guard
        self.failed = failed
        self.detail = detail
        where = "" if page is None else f" on page {page} (block {block})"
        extra = f" ({detail})" if detail else ""
        super().__init__(f"{event} refused{where} in {view}: '{failed}' is false; guard: {guard}{extra}")


class PinnedPageError(GuardRefused):
    """The page is pinned by a live lease; evicting, compressing, offloading or freeing it is refused."""


class TopologyError(GuardRefused):
    """A captured batch forbids this change of block count or order (rule 4)."""


class DomainError(GuardRefused):
    """The event would move a variable outside its declared min/max."""


class ViewConflictError(GuardRefused):
    """Sequences sharing the page would give the effect different values; the event is refused."""


class LeaseError(MorphcacheError):
    """A lease cannot be used."""


class StaleLeaseError(LeaseError):
    """Re-validation at the moment of the read failed: the page is no longer readable at the leased
    generation."""


class LeaseReleasedError(LeaseError):
    """The lease was already released."""


class ForeignLeaseError(LeaseError):
    """The lease was issued by another manager."""


class CapacityError(MorphcacheError):
    """No slot can be freed in a tier: every candidate is pinned, being written or protected."""


class TierError(MorphcacheError):
    """A tier store cannot be used (for example the disk directory is not writable)."""


class DiversionError(MorphcacheError):
    """A non-ready object has zero or several recovery paths (rule 2)."""


class IntegrityError(MorphcacheError):
    """``check_integrity`` found disagreeing values; ``problems`` lists each one."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        shown = "\n  ".join(self.problems[:20])
        more = f"\n  ... and {len(self.problems) - 20} more" if len(self.problems) > 20 else ""
        super().__init__(f"{len(self.problems)} integrity problem(s):\n  {shown}{more}")
