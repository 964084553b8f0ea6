"""Layout proofs with 64-bit bit-vectors: aligned, in bounds, no overlap, for every entry.

For a layout with ``entries`` entries of ``entry_bytes`` at ``base + i * stride`` in a pool of
``pool_bytes`` bytes, and a symbolic entry id ``i < entries`` (and ``j != i``):

    aligned     (base + i * stride) % align == 0
    in bounds   base + i * stride + entry_bytes <= pool_bytes      (no wrap-around)
    no overlap  [addr(i), addr(i) + entry_bytes) and [addr(j), ...) are disjoint
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import z3

from morphcache.spec.model import Layout

from .induction import SolverLimits, Unknown

BITS = 64


@dataclass(frozen=True)
class LayoutResult:
    """One layout obligation; ``witness`` holds the entry ids that break it."""

    name: str
    holds: bool
    witness: dict[str, int] | None = None


def _bv(v: int) -> z3.BitVecRef:
    return z3.BitVecVal(v, BITS)


def _check(limits: SolverLimits, name: str, constraints: list[z3.BoolRef], ids: list[z3.BitVecRef]) -> LayoutResult:
    solver = limits.solver()
    solver.add(*constraints)
    answer = solver.check()
    if answer == z3.unknown:
        raise Unknown(solver.reason_unknown())
    if answer == z3.unsat:
        return LayoutResult(name, True)
    model = solver.model()
    return LayoutResult(name, False, {str(i): model.eval(i, model_completion=True).as_long() for i in ids})


def layout_obligations(layout: Layout, limits: SolverLimits) -> Iterator[LayoutResult]:
    """The three obligations of one layout."""
    i, j = z3.BitVec("i", BITS), z3.BitVec("j", BITS)
    n = _bv(layout.entries)

    def addr(k: z3.BitVecRef) -> z3.BitVecRef:
        return _bv(layout.base) + k * _bv(layout.stride)

    no_wrap = [z3.BVMulNoOverflow(i, _bv(layout.stride), False),
               z3.BVAddNoOverflow(_bv(layout.base), i * _bv(layout.stride), False),
               z3.BVAddNoOverflow(addr(i), _bv(layout.entry_bytes), False)]
    in_range = [z3.ULT(i, n)]
    yield _check(limits, f"{layout.name}: aligned to {layout.align}",
                 in_range + [z3.URem(addr(i), _bv(layout.align)) != 0], [i])
    yield _check(limits, f"{layout.name}: in bounds of {layout.pool_bytes} bytes",
                 in_range + [z3.Or(z3.Not(z3.And(no_wrap)),
                                   z3.UGT(addr(i) + _bv(layout.entry_bytes), _bv(layout.pool_bytes)))], [i])
    yield _check(limits, f"{layout.name}: entries never overlap",
                 in_range + [z3.ULT(j, n), i != j, z3.And(no_wrap),
                             z3.ULT(addr(i), addr(j) + _bv(layout.entry_bytes)),
                             z3.ULT(addr(j), addr(i) + _bv(layout.entry_bytes))], [i, j])
