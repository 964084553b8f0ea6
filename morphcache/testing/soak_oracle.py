"""The soak's oracle: every byte a reader is handed is compared with the tokens the lookup promised,
and every exception with the ones the call documents.

A page at block ``i`` written from tokens ``t`` holds ``expected_payload(t, i, C)`` (the default
store's payload), whatever tiers it went through::

    promised tokens  [ t0 .. t3 | t4 .. t7 | t8 t9 ]        lease.tokens = 10, C = 4
    read payloads      page 0     page 1     tail (first 2 token entries compared)
                                             or lease.partial.payload (a lookup's copied prefix)
    kernel rows        slot      slot       slot             (bytes read from the store, under the lock)

A read either re-validates and returns exactly these bytes, or raises StaleLeaseError.
"""

from __future__ import annotations

import threading
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from morphcache.runtime import (
    CacheManager,
    CapacityError,
    DiversionError,
    GuardRefused,
    IntegrityError,
    Lease,
    StaleLeaseError,
    TierError,
    UnknownPageError,
    expected_payload,
)
from morphcache.runtime.store import TOKEN_BYTES

T = TypeVar("T")

_STATE: tuple[type[Exception], ...] = (GuardRefused, CapacityError, TierError)
_PAGE = _STATE + (UnknownPageError,)
DOCUMENTED: dict[str, tuple[type[Exception], ...]] = {
    "register": _STATE, "append": _STATE, "append_batch": _STATE, "attach": _STATE, "free": _STATE,
    "acquire": _STATE, "capture": _STATE, "uncapture": _STATE, "lookup": _STATE + (DiversionError,),
    "read": (StaleLeaseError,), "kernel_lease": (StaleLeaseError,),
    "offload": _PAGE, "prefetch": _PAGE, "drop": _PAGE, "evict": _PAGE, "admit": _PAGE, "compress": _PAGE,
    "recompress": _PAGE, "build_index": _PAGE, "release_tail": _PAGE, "slide": _STATE, "probe": (),
    "recover": (), "release": (), "check_integrity": (), "frontier": (), "copy": (),
}
"""The exceptions each call may raise in the soak (its arguments are always well formed)."""


class Refused(Exception):
    """A call raised one of its documented errors (the caller goes on)."""


@dataclass
class Tally:
    """Counts of one soak run, shared by its threads (``bump`` under a lock)."""

    counts: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bump(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def problem(self, key: str, text: str) -> None:
        """Count a failure of kind ``key`` and keep its first lines."""
        with self.lock:
            self.counts[key] += 1
            if len(self.problems) < 20:
                self.problems.append(f"{key}: {text}")


def guarded(tally: Tally, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn``; its documented errors become ``Refused`` (counted by call), anything else is an
    undocumented exception (counted, kept with its traceback tail) and also becomes ``Refused``;
    IntegrityError from ``check_integrity`` is an integrity failure."""
    tally.bump("calls")
    try:
        return fn(*args, **kwargs)
    except DOCUMENTED[name] as exc:
        tally.bump(f"refused.{name}.{type(exc).__name__}")
        raise Refused() from exc
    except IntegrityError as exc:
        if name != "check_integrity":
            tally.problem("undocumented", f"{name}: {exc!r}")
        else:
            tally.problem("integrity_failures", str(exc)[:2000])
        raise Refused() from exc
    except Exception as exc:
        tail = "".join(traceback.format_exception(exc)[-4:])
        tally.problem("undocumented", f"{name}: {exc!r}\n{tail}")
        raise Refused() from exc


def _page_ok(data: bytes, tokens: Sequence[int], depth: int, page_size: int) -> bool:
    n = len(tokens)
    want = expected_payload(tokens, depth, page_size)[: n * TOKEN_BYTES]
    return data[: n * TOKEN_BYTES] == want


def check_lease(m: CacheManager, tally: Tally, lease: Lease, promised: Sequence[int]) -> None:
    """Read ``lease`` (payloads) and its kernel row and compare every byte with ``promised`` (the
    lease's tokens); a wrong byte is a wrong read, StaleLeaseError a refused one."""
    C = m.C
    npages = len(lease.pages)
    chunks = [promised[i * C: (i + 1) * C] for i in range(npages)]
    rest = promised[npages * C: lease.tokens]
    if lease.tail is not None:
        chunks.append(rest)
    try:
        view = guarded(tally, "read", m.read, lease, payloads=True)
    except Refused:
        tally.bump("reads_stale")
        return
    assert view.payloads is not None
    bad = [i for i, (data, toks) in enumerate(zip(view.payloads, chunks, strict=True))
           if not _page_ok(data, toks, i, C)]
    if lease.partial is not None:
        part = lease.partial
        if tuple(part.tokens) != tuple(rest) or not _page_ok(part.payload, rest, part.block, C):
            bad.append(npages)
    if bad:
        tally.problem("wrong_reads", f"lease {lease!r} pages {bad} hold bytes other than their tokens'")
    tally.bump("reads_checked")
    try:  # a kernel launch: re-validate, then read the slots the row names, outside the lock (the pins
        # keep them: the lease is this thread's and only it releases it)
        kl = guarded(tally, "kernel_lease", m.kernel_lease, [lease])
        guarded(tally, "kernel_lease", kl.check_live)
    except Refused:
        tally.bump("reads_stale")
        return
    row = [int(s) for s in kl.block_table[0].tolist() if s >= 0]
    wrong = [i for i, (slot, toks) in enumerate(zip(row, chunks, strict=False))
             if not _page_ok(m.store.read(slot), toks, i, C)]  # type: ignore[attr-defined]
    if len(row) != len(chunks) or int(kl.seq_lens[0]) != (lease.tokens if lease.tail is not None else npages * C):
        wrong.append(-1)
    if wrong:
        tally.problem("wrong_reads", f"kernel row of {lease!r}: blocks {wrong} hold bytes other than their tokens'")
    tally.bump("reads_checked")


def check_integrity(m: CacheManager, tally: Tally) -> None:
    """``check_integrity`` now; a report is an integrity failure (the runtime under test is meant to be
    right, so every report is either false or a real disagreement: both fail the run)."""
    with m.lock:
        tally.bump("integrity_checks")
        if m.parts.busy.inflight:
            tally.bump("integrity_checks_in_flight")  # copies reserved, not landed: must be exact too
        try:
            guarded(tally, "check_integrity", m.check_integrity)
        except Refused:
            pass
