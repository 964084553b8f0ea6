"""A sealed page's data-plane work after its ``begin_compress`` (``proposeplan.DataWork``) run in line by
the generated proposals when the hook gives its source, called otherwise: the same pages compressed,
the same firings, either way (the random twins of test_runtime_proposeplan.py run the inline source
against the proposals made one by one, which call the hook)."""

from __future__ import annotations

from typing import Any

import pytest
from rt_helpers import small_config, toks

from morphcache.runtime import CacheManager
from morphcache.runtime.morphology import MAINTAIN
from morphcache.runtime.proposeplan import DataWork


@pytest.mark.parametrize("clash", [False, True], ids=["in-line", "called"])
def test_data_work_in_line_or_called(clash: bool) -> None:
    m = CacheManager(config=small_config(auto_compress=False, auto_admit=False))
    pipe, done = m.parts.pipe, []
    compress = m.parts.storage.data.compress

    def work(pid: int) -> None:
        done.append(pid)
        compress(m.parts.pages.records[pid].gpu_slot)

    names: dict[str, Any] = {"pipe": pipe} if clash else {"work_compress": compress,
                                                          "work_records": m.parts.pages.records}
    hook = DataWork(work, "work_compress(work_records[p].gpu_slot)", names)
    plan = pipe.proposals(MAINTAIN, None, {0: hook})
    m.register("a", toks(0, 12))
    pids = list(m.sequence_pages("a")[:3])
    fired = dict(m.metrics().events_fired)
    plan.each(None, pids)  # type: ignore[attr-defined]
    after = m.metrics().events_fired
    assert all(after.get(ev, 0) - fired.get(ev, 0) == 3 for ev in MAINTAIN)
    assert done == ([] if not clash else pids)  # in line: the hook's function never called
    store = m.parts.storage.data
    assert all(store.compressed[m.parts.pages.records[pid].gpu_slot] for pid in pids)  # type: ignore[attr-defined]
    called = plan.each.__code__.co_names  # type: ignore[attr-defined]  # (the globals the loop reads)
    assert ("then_0" in called) == clash and ("work_compress" in called) != clash
    m.check_integrity()
    m.close()


def test_inline_hook_calls_its_own_statement() -> None:
    """``DataWork.inline``: the function called where the plan cannot run the statement in line is
    compiled from that statement, over the same names."""
    seen: list[int] = []
    hook = DataWork.inline("note(offset + p)", {"note": seen.append, "offset": 100})
    hook(3)
    hook(5)
    assert seen == [103, 105] and hook.source == "note(offset + p)" and set(hook.names) == {"note", "offset"}
