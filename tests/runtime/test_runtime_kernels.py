"""The runtime's lease drives a read kernel: block table, generations and the device-side gen table the
page store publishes; a released lease or a moved generation stops the read."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch

from morphcache.kernels.errors import StaleReadError
from morphcache.kernels.window_read import reference_window_read, window_read
from morphcache.runtime import CacheManager, LeaseReleasedError, Ready

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
    reason="Triton kernels need a GPU or TRITON_INTERPRET=1")

C, HKV, D, W = 16, 2, 16, 24


def test_window_read_under_a_runtime_lease(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(page_size=C, window=W, gpu_pages=8, pool_capacity=8)
    tokens = list(range(3 * C))
    m.register("a", tokens)
    r = m.lookup(tokens)
    assert isinstance(r, Ready) and r.lease.tokens == 3 * C
    kl = m.kernel_lease([r.lease])
    g = torch.Generator().manual_seed(0)
    raw_k = torch.randn(8, C, HKV, D, generator=g)
    raw_v = torch.randn(8, C, HKV, D, generator=g)
    gen_table = torch.tensor(m.store.generations, dtype=torch.int32)  # type: ignore[attr-defined]
    q = torch.randn(2, HKV, D, generator=g)
    q_seq = torch.zeros(2, dtype=torch.int32)
    q_pos = torch.tensor([C + 3, 3 * C - 1], dtype=torch.int32)
    out = window_read(q, q_seq, q_pos, kl, raw_k, raw_v, gen_table, W)
    ref = reference_window_read(q, q_seq, q_pos, kl.block_table, raw_k, raw_v, W)
    torch.testing.assert_close(out, ref)

    moved = gen_table.clone()
    moved[int(kl.block_table[0, 1])] += 1  # the page was rewritten behind the lease's back
    with pytest.raises(StaleReadError):
        window_read(q, q_seq, q_pos, kl, raw_k, raw_v, moved, W)

    m.release(r.lease)
    with pytest.raises(LeaseReleasedError):
        window_read(q, q_seq, q_pos, kl, raw_k, raw_v, gen_table, W)
