"""The gated-delta-rule kernels (gdn_prefill, gdn_decode, gdn_restore) against their plain-torch
references, the references against the model's delta rule, and one linear layer served through
the kernels: prefill with checkpoints, restore a checkpoint under a lease, continue, decode."""

from __future__ import annotations

import pytest
import torch

from morphcache.kernels import (
    StaleReadError,
    gdn_decode,
    gdn_prefill,
    gdn_restore,
    reference_gdn_decode,
    reference_gdn_prefill,
    reference_gdn_restore,
)
from morphcache.model import HybridModel
from morphcache.model.config import model_config
from morphcache.model.delta import delta_rule_chunked, delta_rule_recurrent
from morphcache.model.linear import rule_inputs

ATOL = 2e-5


def _inputs(n: int, h: int, dk: int, dv: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(torch.get_default_device()).manual_seed(seed)
    q = torch.randn(n, h, dk, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(n, h, dk, generator=gen), dim=-1)
    v = torch.randn(n, h, dv, generator=gen)
    g = -2.0 * torch.rand(n, h, generator=gen)
    beta = torch.rand(n, h, generator=gen)
    return q, k, v, g, beta


def _row(i: int, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """Row i of each tensor as its own (aligned) one-row tensor: a decode step's inputs."""
    return [t[i : i + 1].clone() for t in tensors]


def _i32(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


# lens, H, K, V, C, start_pos, reset; V = 70 splits the state over two column blocks
CASES = [
    ([0, 1, 7, 33], 3, 5, 12, 5, [0, 3, 10, 2], [1, 0, 0, 1]),
    ([21], 1, 16, 16, 16, [0], [1]),
    ([9, 17], 2, 12, 70, 3, [4, 0], [0, 1]),
]


@pytest.mark.parametrize("lens,H,K,V,C,start,reset", CASES)
def test_gdn_prefill_matches_reference(
    lens: list[int], H: int, K: int, V: int, C: int, start: list[int], reset: list[int]  # noqa: N803
) -> None:
    total, n_seq, n_slots = sum(lens), len(lens), 24
    q, k, v, g, beta = _inputs(total, H, K, V, seed=total)
    cu = _i32([0, *torch.tensor(lens).cumsum(0).tolist()])
    slots = _i32(list(range(n_seq))[::-1])
    pages = max((s + n) // C for s, n in zip(start, lens, strict=True)) + 1
    table = torch.full((n_seq, pages), -1, dtype=torch.int32)
    free = iter(range(n_seq, n_slots))
    for n, (s, length) in enumerate(zip(start, lens, strict=True)):
        for b in range(s // C, (s + length) // C, 2):  # every other boundary passed
            table[n, b] = next(free)
    states = torch.randn(n_slots, H, K, V, generator=torch.Generator(torch.get_default_device()).manual_seed(7))
    want_states = states.clone()
    got = gdn_prefill(
        q, k, v, g, beta, cu, _i32(start), slots, _i32(reset), states, page_size=C, checkpoint_slots=table
    )
    want = reference_gdn_prefill(q, k, v, g, beta, cu, _i32(start), slots, _i32(reset), want_states, C, table)
    assert (got - want).abs().max() <= ATOL
    assert (states - want_states).abs().max() <= ATOL
    assert bool((table >= 0).any())


def test_prefill_reference_is_the_model_delta_rule() -> None:
    q, k, v, g, beta = _inputs(23, 2, 6, 9, seed=3)
    init = torch.randn(2, 6, 9, generator=torch.Generator(torch.get_default_device()).manual_seed(4))
    states = torch.stack([torch.zeros_like(init), init])
    out = reference_gdn_prefill(q, k, v, g, beta, _i32([0, 23]), _i32([5]), _i32([1]), _i32([0]), states, 4)
    for rule in (delta_rule_recurrent, delta_rule_chunked):
        o, s = rule(q, k, v, g, beta, init)
        assert (o - out).abs().max() <= ATOL and (s - states[1]).abs().max() <= ATOL


def test_prefill_in_pieces_then_decode_equals_one_pass() -> None:
    """State continuity: 10 rows, then 9 more from the saved slot, then 2 decode steps."""
    h, dk, dv, c = 2, 8, 8, 4
    q, k, v, g, beta = _inputs(21, h, dk, dv, seed=11)
    whole = torch.zeros(2, h, dk, dv)
    want = reference_gdn_prefill(q, k, v, g, beta, _i32([0, 21]), _i32([0]), _i32([0]), _i32([1]), whole, c)
    states = torch.randn(3, h, dk, dv)
    first = gdn_prefill(q[:10], k[:10], v[:10], g[:10], beta[:10], _i32([0, 10]), _i32([0]), _i32([2]), _i32([1]),
                        states, page_size=c)
    rest = gdn_prefill(q[10:19], k[10:19], v[10:19], g[10:19], beta[10:19], _i32([0, 9]), _i32([10]), _i32([2]),
                       _i32([0]), states, page_size=c)
    steps = [gdn_decode(*_row(i, q, k, v, g, beta), _i32([2]), states) for i in (19, 20)]
    got = torch.cat([first, rest, *steps])
    assert (got - want).abs().max() <= ATOL
    assert (states[2] - whole[0]).abs().max() <= ATOL


def test_gdn_decode_matches_reference_and_saves_checkpoints() -> None:
    h, dk, dv = 3, 5, 68
    q, k, v, g, beta = _inputs(4, h, dk, dv, seed=2)
    states = torch.randn(10, h, dk, dv)
    want_states = states.clone()
    slots, save = _i32([3, 1, 0, 9]), _i32([-1, 7, -1, 2])
    got = gdn_decode(q, k, v, g, beta, slots, states, save_slot=save)
    want = reference_gdn_decode(q, k, v, g, beta, slots, want_states, save)
    assert (got - want).abs().max() <= ATOL
    assert (states - want_states).abs().max() <= ATOL
    assert torch.equal(states[7], states[1]) and torch.equal(states[2], states[9])


def _restore_world(lease_cls):  # noqa: ANN202
    states = torch.randn(8, 2, 4, 6, generator=torch.Generator(torch.get_default_device()).manual_seed(1))
    gen_table = _i32([5, 6, 7, 8, 9, 10, 11, 12])
    table = _i32([[4, -1, 6], [1, 2, -1]])
    lease = lease_cls(table, torch.where(table >= 0, gen_table[table.clamp(min=0).long()], 0), _i32([12, 8]))
    return states, gen_table, lease


def test_gdn_restore_copies_checkpoints_under_a_lease(lease_cls) -> None:
    states, gen_table, lease = _restore_world(lease_cls)
    want = states.clone()
    rows, blocks, dst = _i32([0, 1, 0]), _i32([2, 1, 0]), _i32([0, 3, 5])
    gdn_restore(rows, blocks, dst, lease, states, gen_table, page_size=4)
    reference_gdn_restore(rows, blocks, dst, lease.block_table, want)
    assert torch.equal(states, want)
    assert torch.equal(states[0], states[6]) and torch.equal(states[3], states[2]) and torch.equal(states[5], states[4])
    assert lease.live_checks == 1


def test_gdn_restore_refuses_a_stale_checkpoint(lease_cls, released_error) -> None:
    states, gen_table, lease = _restore_world(lease_cls)
    before = states.clone()
    gen_table[2] += 1  # the checkpoint slot was freed and rewritten after the lease was granted
    with pytest.raises(StaleReadError) as err:
        gdn_restore(_i32([1, 0]), _i32([1, 0]), _i32([0, 3]), lease, states, gen_table, page_size=4)
    assert err.value.sequences == (1,)
    assert torch.equal(states[0], before[0])  # the stale copy did not happen
    assert torch.equal(states[3], before[4])  # the fresh one did
    lease.release()
    with pytest.raises(released_error):
        gdn_restore(_i32([0]), _i32([0]), _i32([3]), lease, states, gen_table, page_size=4)


def test_a_linear_layer_served_through_the_kernels(lease_cls) -> None:
    """Page-range prefill with checkpoints, a restore at a page boundary, the rest, two decodes."""
    dev = torch.get_default_device()
    with torch.device("cpu"), torch.no_grad():  # the model runs on cpu; its rule inputs go to the kernels' device
        model = HybridModel(model_config("gdn-hybrid"), seed=3)
        layer = model.layers[0]
        c = model.config.page_size
        tokens = torch.randint(0, 256, (2 * c + 7,), generator=torch.Generator().manual_seed(0))
        q, k, v, g, beta = rule_inputs(layer, layer.attn_norm(model.embed(tokens)))
        want, _ = delta_rule_recurrent(q, k, v, g, beta, torch.zeros(4, 16, 16))
    q, k, v, g, beta, want = (t.to(dev) for t in (q, k, v, g, beta, want))
    h, d = q.shape[1], q.shape[2]
    states = torch.zeros(4, h, d, d)  # slot 0: first request, 1 and 2: checkpoints, 3: second request
    n = 2 * c
    table = _i32([[1, 2]])
    first = gdn_prefill(q[:n], k[:n], v[:n], g[:n], beta[:n], _i32([0, n]), _i32([0]), _i32([0]), _i32([1]), states,
                        page_size=c, checkpoint_slots=table)
    lease = lease_cls(table, _i32([[0, 0]]), _i32([n]))
    gdn_restore(_i32([0]), _i32([0]), _i32([3]), lease, states, torch.zeros(4, dtype=torch.int32), page_size=c)
    rest = gdn_prefill(q[c:-2], k[c:-2], v[c:-2], g[c:-2], beta[c:-2], _i32([0, c + 5]), _i32([c]), _i32([3]),
                       _i32([0]), states, page_size=c)
    steps = [gdn_decode(*_row(i, q, k, v, g, beta), _i32([3]), states) for i in (q.shape[0] - 2, q.shape[0] - 1)]
    assert (first - want[:n]).abs().max() <= ATOL
    assert (torch.cat([rest, *steps]) - want[c:]).abs().max() <= ATOL
