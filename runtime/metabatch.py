"""The pages of one step as the policy interface sees them: a sequence of ``PageMeta`` that carries the
page ids and builds a page's metadata only when it is read.

A lookup's hit, an attached prefix or a freed block table tells the policy about thousands of pages
at once.  A policy that keys its order by page id (LRU) reads ``page_ids(metas)`` and never touches a
``PageMeta``; a policy that scores pages iterates the batch as any sequence::

    MetaBatch([7, 12, 40], directory.__getitem__)
        .pages         [7, 12, 40]             (no PageMeta read)
        [1]            PageMeta of page 12     (looked up on demand)
        iter / len     every PageMeta / 3
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

if TYPE_CHECKING:
    from .policy import PageMeta


class MetaBatch(Sequence["PageMeta"]):
    """Pages ``pages`` (distinct ids, in the step's order) and ``lookup``, id -> its PageMeta;
    ``ids`` the same pages as an array when the step has one (then the list is made only if read)."""

    __slots__ = ("_pages", "lookup", "ids")

    def __init__(self, pages: list[int] | None, lookup: Callable[[int], PageMeta],
                 ids: np.ndarray | None = None) -> None:
        assert pages is not None or ids is not None
        self._pages = pages
        self.lookup = lookup
        self.ids = ids

    @property
    def pages(self) -> list[int]:
        """The page ids as a list."""
        if self._pages is None:
            self._pages = self.ids.tolist()  # type: ignore[union-attr]
        return self._pages

    def __len__(self) -> int:
        return len(self.ids) if self._pages is None else len(self._pages)  # type: ignore[arg-type]

    @overload
    def __getitem__(self, i: int) -> PageMeta: ...

    @overload
    def __getitem__(self, i: slice) -> list[PageMeta]: ...

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return list(map(self.lookup, self.pages[i]))
        return self.lookup(self.pages[i])

    def __iter__(self) -> Iterator[PageMeta]:
        return map(self.lookup, self.pages)

    def __repr__(self) -> str:
        return f"MetaBatch(pages={self.pages!r})"


def page_array(metas: Sequence[PageMeta]) -> np.ndarray:
    """The page ids of ``metas`` as an int64 array (the batch's own when it carries one)."""
    if isinstance(metas, MetaBatch) and metas.ids is not None:
        return metas.ids
    pages = page_ids(metas)
    return np.fromiter(pages, dtype=np.int64, count=len(pages))


def page_ids(metas: Sequence[PageMeta]) -> list[int]:
    """The page ids of ``metas`` (read off a ``MetaBatch`` without building its metadata)."""
    if isinstance(metas, MetaBatch):
        return metas.pages
    return [meta.page for meta in metas]
