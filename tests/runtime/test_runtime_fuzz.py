"""Fuzzing the public CacheManager calls with arguments of every type: only the documented
MorphcacheError family may escape, and the manager's integrity holds afterwards."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rt_helpers import small_config, toks

from morphcache.runtime import GDN_SPEC, CacheManager, MorphcacheError, NeedsRecovery, Ready
from morphcache.runtime import errors as runtime_errors

CALLS = ["register", "append", "append_batch", "attach", "free", "frontier", "sequence_pages", "lookup", "probe",
         "recover", "acquire", "read", "release", "kernel_lease", "compress", "recompress", "build_index",
         "release_tail", "slide", "offload", "prefetch", "wait_prefetches", "drop", "evict", "admit", "capture",
         "uncapture", "page_state", "page_values", "state_path", "rebuild_state", "save_state", "offload_state",
         "prefetch_state", "drop_state"]
KEYWORDS = {"lookup": ["limit", "owner"], "probe": ["limit"], "recover": ["block"], "read": ["payloads"],
            "register": ["approximate"], "rebuild_state": ["exact"]}
ODD = [None, True, False, -1, 0, 1, 3, 2**64, 2**70, 1.5, float("nan"), "a", "", "zz", "host", "disk", "gpu", b"x",
       [], [1, 2, 3], ["a"], [None], {}, {"a": [1]}, {"b": "x"}, np.array(5), np.array([1, 2]), np.int64(3),
       np.array([[1]]), object(), (1, 2), range(5), [2**64], [-1], {1, 2}, "a" * 100, ("a", "zz")]


def _positional(name: str) -> int:
    params = inspect.signature(getattr(CacheManager, name)).parameters.values()
    return sum(1 for p in params if p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self")


DOCUMENTED = {cls for cls in vars(runtime_errors).values()
              if isinstance(cls, type) and issubclass(cls, MorphcacheError)}


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), recurrent=st.booleans())
def test_random_calls_raise_only_morphcache_errors(tmp_path: Path, data: st.DataObject, recurrent: bool) -> None:
    leases: list[Any] = []
    plans: list[Any] = []
    spec = GDN_SPEC if recurrent else None  # with and without the recurrent part
    with CacheManager(spec, small_config(tmp_path / "fuzz", max_sequence_tokens=64)) as m:
        m.register("a", toks(0, 9))
        m.register("b", toks(0, 5))
        for _ in range(data.draw(st.integers(5, 40))):
            pages = [*m.cached_pages(), *(p for s in m.sequences() for p in m.sequence_pages(s))][:6]
            pool = ODD + [toks(0, 9), toks(0, 3), "a", "b"] + pages + leases[-3:] + plans[-2:]
            name = data.draw(st.sampled_from(CALLS))
            args = [data.draw(st.sampled_from(pool)) for _ in range(_positional(name))]
            kwargs = {k: data.draw(st.sampled_from(pool)) for k in KEYWORDS.get(name, []) if data.draw(st.booleans())}
            try:
                result = getattr(m, name)(*args, **kwargs)
            except MorphcacheError as exc:
                assert type(exc) in DOCUMENTED
                continue
            if isinstance(result, Ready):
                leases.append(result.lease)
            elif isinstance(result, NeedsRecovery):
                plans.append(result.plan)
            elif name == "acquire":
                leases.append(result)
        m.wait_prefetches()
        m.check_integrity()


def test_every_public_call_with_arguments_is_fuzzed() -> None:
    public = {name for name, fn in inspect.getmembers(CacheManager, inspect.isfunction)
              if not name.startswith("_") and not fn.__qualname__.startswith("ManagerBase.")  # internal state
              and _positional(name) > 0}
    assert public <= set(CALLS), sorted(public - set(CALLS))
