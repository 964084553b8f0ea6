"""Bad input: each raises a specific exception with a clear message and leaves the state intact."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from rt_helpers import toks

from morphcache.runtime import (
    BadInputError,
    CacheManager,
    ConfigError,
    DuplicateSequenceError,
    ForeignLeaseError,
    LeaseReleasedError,
    MorphcacheError,
    Ready,
    RuntimeConfig,
    UnknownPageError,
    UnknownSequenceError,
)


@pytest.fixture
def m(make_manager: Callable[..., CacheManager]) -> CacheManager:
    mgr = make_manager(max_sequence_tokens=64)
    mgr.register("a", toks(0, 9))
    return mgr


CASES: list[tuple[str, Callable[[CacheManager], Any], type[Exception], str]] = [
    ("unknown sequence", lambda m: m.append("nope", [1]), UnknownSequenceError, "'nope'"),
    ("unknown sequence free", lambda m: m.free("nope"), UnknownSequenceError, "no live sequence"),
    ("non-str id", lambda m: m.register(7, [1]), BadInputError, "non-empty str"),  # type: ignore[arg-type]
    ("empty id", lambda m: m.register("", [1]), BadInputError, "non-empty str"),
    ("duplicate", lambda m: m.register("a"), DuplicateSequenceError, "already registered"),
    ("token str", lambda m: m.append("a", "abc"), BadInputError, "sequence of ints"),  # type: ignore[arg-type]
    ("token float", lambda m: m.append("a", [1, 2.5]), BadInputError, "tokens[1] must be an int"),
    ("token none", lambda m: m.append("a", [4, None]), BadInputError, "tokens[1] must be an int"),
    ("token negative", lambda m: m.append("a", [3, -1]), BadInputError, "got -1"),
    ("token oversized", lambda m: m.append("a", [1 << 64]), BadInputError, "2**64"),
    ("tokens none", lambda m: m.lookup(None), BadInputError, "sequence of ints"),  # type: ignore[arg-type]
    ("negative limit", lambda m: m.lookup([1], limit=-1), BadInputError, "limit"),
    ("oversized append", lambda m: m.append("a", [0] * 100), BadInputError, "exceeds max_sequence_tokens"),
    ("unknown page", lambda m: m.offload(10_000), UnknownPageError, "10000"),
    ("page id type", lambda m: m.drop("x"), UnknownPageError, "'x'"),  # type: ignore[arg-type]
    ("offload target", lambda m: m.offload(m.sequence_pages("a")[0], "tape"), BadInputError, "'tape'"),
    ("not a lease", lambda m: m.release("lease"), BadInputError, "expected a Lease"),  # type: ignore[arg-type]
    ("not a plan", lambda m: m.recover("plan"), BadInputError, "RecoveryPlan"),  # type: ignore[arg-type]
    ("capture unknown", lambda m: m.capture(["a", "zz"]), UnknownSequenceError, "'zz'"),
    ("0-d array", lambda m: m.lookup(np.array(5)), BadInputError, "sequence of ints, got ndarray"),
    ("numpy scalar", lambda m: m.append("a", np.int64(3)), BadInputError, "sequence of ints, got int64"),
    ("2-d array", lambda m: m.lookup(np.array([[1, 2]])), BadInputError, "tokens[0] must be an int"),
    ("probe limit", lambda m: m.probe([1], limit=(1, 2)), BadInputError, "limit"),  # type: ignore[arg-type]
    ("batch not a mapping", lambda m: m.append_batch(3), BadInputError, "map sequence ids"),  # type: ignore[arg-type]
    ("capture one str", lambda m: m.capture("a"), BadInputError, "not a single str"),
    ("capture not iterable", lambda m: m.uncapture(2), BadInputError, "iterable"),  # type: ignore[arg-type]
    ("offload target array", lambda m: m.offload(m.sequence_pages("a")[0], np.array([1, 2])),  # type: ignore[arg-type]
     BadInputError, "offload target"),
    ("kernel device", lambda m: m.kernel_lease([], device=-1), BadInputError, "torch device"),
    ("kernel leases", lambda m: m.kernel_lease(0), BadInputError, "iterable"),  # type: ignore[arg-type]
    ("wait timeout", lambda m: m.wait_prefetches("soon"), BadInputError, "timeout"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(m: CacheManager, case: tuple[str, Callable[[CacheManager], Any], type[Exception], str]) -> None:
    _, call, exc_type, text = case
    before = m.frontier("a"), len(m.page_ids())
    with pytest.raises(exc_type, match=text.replace("*", r"\*").replace("[", r"\[")) as exc:
        call(m)
    assert isinstance(exc.value, MorphcacheError)
    assert (m.frontier("a"), len(m.page_ids())) == before
    m.check_integrity()


def test_double_and_foreign_release(m: CacheManager, make_manager: Callable[..., CacheManager]) -> None:
    r = m.lookup(toks(0, 8))
    assert isinstance(r, Ready)
    other = make_manager()
    with pytest.raises(ForeignLeaseError, match="not issued by this manager"):
        other.release(r.lease)
    m.release(r.lease)
    with pytest.raises(LeaseReleasedError, match="already released"):
        m.release(r.lease)
    m.check_integrity()


def test_attach_to_a_non_empty_sequence(m: CacheManager) -> None:
    r = m.lookup(toks(0, 8))
    assert isinstance(r, Ready)
    with pytest.raises(BadInputError, match="empty sequence"):
        m.attach("a", r.lease)
    m.release(r.lease)
    m.check_integrity()


@pytest.mark.parametrize("kwargs", [dict(page_size=0), dict(page_size=6, compress_block=4), dict(window=-1),
                                    dict(backend="fast"), dict(disk_pages=4), dict(gpu_pages=True),
                                    dict(constants={"C": "x"}), dict(disk_dir=""), dict(disk_dir="  ", disk_pages=4),
                                    dict(disk_dir="/tmp/morphcache-disk", disk_pages=0)])
def test_bad_config(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RuntimeConfig(**kwargs)
