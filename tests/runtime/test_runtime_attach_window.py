"""Taking a leased prefix whose window slid out: the spec's ``end_attach`` refuses it, all or nothing.

C=4 tokens per page, a window of W=2 tokens (shorter than a page, so a writer's partial last page
can be far enough ahead for its last whole page to slide)::

    writer w, 11 tokens:   | page 0 | page 1 | page 2 (3 of 4) |
                                             ^ w's frontier 11: page 1 ends at 8, 8 + W <= 11, so it slides
    w's lease (acquire):   whole pages 0, 1 (8 tokens) + w's own partial page 2 (not shared)
    b attaches the lease:  b's block table 0, 1, frontier 8: b's window layers read tokens 6, 7 of page 1

So b's kernels would read raw window KV that is gone; ``attach`` must raise the spec's refusal
(GuardRefused naming ``end_attach``) and leave every value as it was.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rt_helpers import digest, toks

from morphcache.runtime import CacheManager, GuardRefused


def test_attach_of_a_prefix_whose_last_window_slid_out_is_refused_atomically(
        make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(window=2)
    m.register("w", toks(0, 11))
    w_pages = m.sequence_pages("w")
    # while the window of page 1 is live, the same attach goes through
    lease = m.acquire("w")
    m.register("b0")
    assert m.attach("b0", lease) == 8
    m.free("b0")
    m.release(lease)
    assert m.page_state(w_pages[1])["window"] == "live"
    assert m.slide("w") >= 1 and m.page_state(w_pages[1])["window"] == "expired"
    lease = m.acquire("w")
    assert lease.pages == w_pages[:2] and lease.tail == w_pages[2]
    m.register("b")
    before = digest(m)
    with pytest.raises(GuardRefused) as exc:
        m.attach("b", lease)
    assert exc.value.event == "end_attach" and "reader 'b'" in str(exc.value), exc.value
    assert "window[q] == 'live'" in exc.value.failed
    # the refusal names the page the quantifier failed for, with the values its body read there
    assert exc.value.page == w_pages[1] and exc.value.block == 1
    assert exc.value.detail == (f"false for q = page {w_pages[1]}: block[r, q]='in', depth[q]=1, frontier[r]=8, "
                                "window[q]='expired'"), exc.value.detail
    after = digest(m)
    assert after.pop("refused") == {**before.pop("refused"), "end_attach": 1}
    assert after == before  # no page joined b's block table, no pin moved, b's frontier is 0
    assert m.frontier("b") == 0 and m.sequence_pages("b") == ()
    m.read(lease)  # the writer's own lease is untouched and still reads
    m.release(lease)
    m.check_integrity()
