"""The page writer's bulk work against the plain one: a record made for an opened page equals the one
the keyword constructor makes."""

from __future__ import annotations

from morphcache.runtime.pages import MetaColumns, PageRecord
from morphcache.runtime.policy import PageMeta


def _slots(cls: type) -> list[str]:
    return [name for klass in cls.__mro__ for name in getattr(klass, "__slots__", ())]


def test_an_opened_record_equals_the_constructed_one() -> None:
    made, fast = MetaColumns(4), MetaColumns(4)
    for cols in (made, fast):  # stale values where the pages were: both must reset them
        cols.ensure(40)
        cols.last_use[:], cols.uses[:], cols.holders[:] = 7, 3, 2
    want = PageRecord(made, 37, 12, 0xABC, 5, session="s", task="t", writer="w", bytes=512)
    got = PageRecord.opened(fast, 37, 12, 0xABC, 5, "s", "t", "w", 512)
    names = [name for name in _slots(PageRecord) if name != "cols"] + ["last_use", "uses", "holders"]
    assert set(_slots(PageMeta)) <= set(names)
    for name in names:
        assert getattr(got, name) == getattr(want, name), name
    assert got.token_ids == [] and got.token_ids is not want.token_ids
    assert (fast.last_use == made.last_use).all() and (fast.uses == made.uses).all()
    assert (fast.holders == made.holders).all()
