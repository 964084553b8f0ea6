"""Fixtures for the kernel tests: a small paged world (pools, block tables, lease) built from dense
per-sequence K/V, and a test lease.

Tests run where the kernels run: on cpu under the Triton interpreter, on cuda when the kernels are
compiled.  There, every tensor a test makes without naming a device is made on cuda (an autouse
fixture sets torch's default device), so a test reads the same on both.

Pages of the sequences are scattered over a shuffled page id space; every pool slot that no
sequence owns holds random garbage, so a kernel that reads past a tail or outside its pages
produces a visible error instead of a lucky zero.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():  # pragma: no cover
    # No GPU: run the kernels under the Triton interpreter (must be set before they are defined).
    os.environ["TRITON_INTERPRET"] = "1"

from morphcache.kernels import KernelLease, reference_compress, reference_store  # noqa: E402


class LeaseReleased(RuntimeError):
    """Raised by TestLease.check_live after release()."""


class TestLease(KernelLease):
    """A lease over fixed tensors that can be released by hand."""

    __test__ = False  # not a test class

    def __init__(self, block_table: torch.Tensor, lease_generations: torch.Tensor, seq_lens: torch.Tensor):
        self.block_table = block_table
        self.lease_generations = lease_generations
        self.seq_lens = seq_lens
        self.released = False
        self.live_checks = 0

    def release(self) -> None:
        self.released = True

    def check_live(self) -> None:
        self.live_checks += 1
        if self.released:
            raise LeaseReleased("lease was released")


def device() -> torch.device:
    return torch.device("cuda") if os.environ.get("TRITON_INTERPRET") != "1" else torch.device("cpu")


@dataclass
class World:
    """One layer's pools holding B sequences, plus their dense K/V for cross-checks."""

    C: int
    Hkv: int
    D: int
    seq_lens: list[int]
    raw_k: torch.Tensor
    raw_v: torch.Tensor
    comp_k: torch.Tensor
    comp_v: torch.Tensor
    idx_k: torch.Tensor
    pool_bias: torch.Tensor
    gen_table: torch.Tensor
    block_table: torch.Tensor
    lease_generations: torch.Tensor
    dense_k: list[torch.Tensor] = field(default_factory=list)
    dense_v: list[torch.Tensor] = field(default_factory=list)

    @property
    def P(self) -> int:  # noqa: N802 - the pool size is called P throughout the contract
        return self.raw_k.shape[0]

    def lease(self) -> TestLease:
        return TestLease(
            self.block_table.clone(),
            self.lease_generations.clone(),
            torch.tensor(self.seq_lens, dtype=torch.int32, device=self.raw_k.device),
        )

    def page(self, seq: int, block: int) -> int:
        return int(self.block_table[seq, block])

    def decode_queries(self, hq: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One query per sequence at its last position."""
        seqs = list(range(len(self.seq_lens)))
        pos = [t - 1 for t in self.seq_lens]
        return self._queries(seqs, pos, hq, seed)

    def prefill_queries(
        self, hq: int, seed: int = 0, stride: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries at every ``stride``-th position of every sequence (always including the last)."""
        seqs, pos = [], []
        for s, t in enumerate(self.seq_lens):
            ps = sorted(set(range(0, t, stride)) | {t - 1})
            seqs += [s] * len(ps)
            pos += ps
        return self._queries(seqs, pos, hq, seed)

    def _queries(
        self, seqs: Sequence[int], pos: Sequence[int], hq: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(1000 + seed)
        dev = self.raw_k.device
        q = torch.randn(len(seqs), hq, self.D, generator=gen, device="cpu").to(dev)
        return (
            q,
            torch.tensor(seqs, dtype=torch.int32, device=dev),
            torch.tensor(pos, dtype=torch.int32, device=dev),
        )


def build_world(
    seq_lens: Sequence[int],
    C: int = 4,  # noqa: N803
    Hkv: int = 2,  # noqa: N803
    D: int = 16,  # noqa: N803
    *,
    seed: int = 0,
    spare_pages: int = 3,
    pad_blocks: int = 1,
) -> World:
    """Scatter the pages of ``seq_lens`` sequences over a shuffled pool and fill every object.

    ::

        seq 0 (T=6, C=4):  block 0 -> page 7 | block 1 -> page 2 (partial)  | -1 padding
        seq 1 (T=9, C=4):  block 0 -> page 0 | block 1 -> page 5 | block 2 -> page 3 (partial)

    Complete pages are compressed with ``reference_compress``; ``gen_table`` holds random
    generations and the lease records them.
    """
    with torch.device("cpu"):  # built on cpu from the seed (the same values on every device), then moved
        return _build_world(seq_lens, C, Hkv, D, seed, spare_pages, pad_blocks)


def _build_world(
    seq_lens: Sequence[int], C: int, Hkv: int, D: int, seed: int, spare_pages: int, pad_blocks: int  # noqa: N803
) -> World:
    gen = torch.Generator().manual_seed(seed)
    dev = device()
    blocks = [-(-t // C) for t in seq_lens]
    max_pages = max(blocks, default=0) + pad_blocks
    n_pages = sum(blocks) + spare_pages
    perm = torch.randperm(n_pages, generator=gen).tolist()

    raw_k = torch.randn(n_pages, C, Hkv, D, generator=gen)
    raw_v = torch.randn(n_pages, C, Hkv, D, generator=gen)
    comp_k = torch.randn(n_pages, Hkv, D, generator=gen)
    comp_v = torch.randn(n_pages, Hkv, D, generator=gen)
    idx_k = torch.randn(n_pages, D, generator=gen)
    pool_bias = torch.randn(C, Hkv, D, generator=gen)
    gen_table = torch.randint(0, 1000, (n_pages,), generator=gen, dtype=torch.int32)
    block_table = torch.full((len(seq_lens), max_pages), -1, dtype=torch.int32)

    dense_k, dense_v, complete = [], [], []
    nxt = 0
    for s, t in enumerate(seq_lens):
        pages = perm[nxt : nxt + blocks[s]]
        nxt += blocks[s]
        block_table[s, : len(pages)] = torch.tensor(pages, dtype=torch.int32)
        k = torch.randn(t, Hkv, D, generator=gen)
        v = torch.randn(t, Hkv, D, generator=gen)
        pos = torch.arange(t)
        slots = torch.tensor(pages, dtype=torch.int64)[pos // C] * C + pos % C if t else torch.zeros(0)
        reference_store(k, v, slots.long(), raw_k, raw_v)
        dense_k.append(k.to(dev))
        dense_v.append(v.to(dev))
        complete += pages[: t // C]
    complete_ids = torch.tensor(complete, dtype=torch.int64)
    reference_compress(complete_ids, raw_k, raw_v, pool_bias, comp_k, comp_v, idx_k)
    lease_generations = torch.where(block_table >= 0, gen_table[block_table.clamp(min=0).long()], 0)
    return World(
        C, Hkv, D, list(seq_lens),
        raw_k.to(dev), raw_v.to(dev), comp_k.to(dev), comp_v.to(dev), idx_k.to(dev), pool_bias.to(dev),
        gen_table.to(dev), block_table.to(dev), lease_generations.to(torch.int32).to(dev),
        dense_k, dense_v,
    )


@pytest.fixture(autouse=True)
def _default_device() -> Iterator[None]:
    """Tensors a test makes without naming a device are made where the kernels run."""
    if device().type == "cpu":
        yield
        return
    with torch.device(device()):
        yield


@pytest.fixture
def make_world() -> Callable[..., World]:
    """Factory: make_world(seq_lens, C=4, Hkv=2, D=16, seed=0, spare_pages=3, pad_blocks=1)."""
    return build_world


@pytest.fixture
def lease_cls() -> type[TestLease]:
    return TestLease


@pytest.fixture
def released_error() -> type[Exception]:
    return LeaseReleased
