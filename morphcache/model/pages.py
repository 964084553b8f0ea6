"""Token/page arithmetic shared by the golden and incremental forwards.

::

     positions  0 1 2 3 | 4 5 6 7 | 8 9 10          C = 4, query at t = 10
     pages      page 0  | page 1  | page 2 (partial)
     compressed  [c0]      [c1]                     compressed_pages(10, 4) = range(0, 2)
     tail                           8 9 10           tail_positions(10, 4)   = range(8, 11)
     window (W=6)           5 6 7 | 8 9 10           window_positions(10, 6) = range(5, 11)

All ranges are half-open Python ranges of page indices or token positions.
"""

from __future__ import annotations


def page_of(t: int, page_size: int) -> int:
    """Index of the page holding position t: t // C."""
    return t // page_size


def complete_pages(length: int, page_size: int) -> int:
    """Number of complete pages in a sequence of `length` tokens: length // C."""
    return length // page_size


def compressed_pages(t: int, page_size: int) -> range:
    """Pages whose compressed entry a query at t may see: 0 .. page_of(t) - 1."""
    return range(0, page_of(t, page_size))


def tail_positions(t: int, page_size: int) -> range:
    """Raw positions of the query's own page up to and including t (never empty)."""
    return range(page_of(t, page_size) * page_size, t + 1)


def window_positions(t: int, window: int) -> range:
    """Raw positions a sliding-window query at t sees: max(0, t-W+1) .. t."""
    return range(max(0, t - window + 1), t + 1)
