"""Many readers: leases that outlive their sequence, page ids reused under them, attach refused by the
spec.  Every kernel-lease row either re-validates and holds the bytes its lease promised, or is
refused with StaleLeaseError (never a bare KeyError, never another sequence's bytes)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from rt_helpers import digest, toks

from morphcache.runtime import (
    CacheManager,
    GuardRefused,
    Lease,
    MorphcacheError,
    Ready,
    RuntimeConfig,
    StaleLeaseError,
    TopologyError,
    expected_payload,
)


def test_freed_sequences_partial_page_stays_pinned_by_its_lease() -> None:
    """The soak case: a's lease keeps its partial last page (acquire_tail), so b cannot get that page
    id, and once a is freed the page is no longer a's own: check_live refuses it cleanly."""
    m = CacheManager(config=RuntimeConfig(page_size=4, window=8, gpu_pages=32))
    m.register("a", [1, 2, 3, 4, 5, 6])
    lease = m.acquire("a")
    tail = lease.tail
    assert tail is not None and m.page_state(tail)["pin"] == 1
    m.free("a")
    m.register("b", [900, 901])
    assert tail not in m.sequence_pages("b")  # the pinned id was not reused
    kl = m.kernel_lease([lease])
    assert int(kl.block_table[0, -1]) == m.page_state(tail)["gpu_slot"] != m.page_state(m.sequence_pages("b")[0])[
        "gpu_slot"]
    with pytest.raises(StaleLeaseError, match="failed re-validation"):
        kl.check_live()
    m.release(lease)
    assert tail not in m.page_ids()  # forgotten once nothing holds it
    m.check_integrity()
    m.close()


def test_attach_to_a_captured_sequence_is_refused_and_changes_nothing(
        make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager()
    m.register("w", toks(0, 12))
    m.register("a")
    m.capture(["a"])
    r = m.lookup(toks(0, 12), owner="a")
    assert isinstance(r, Ready)
    before = digest(m)
    with pytest.raises(TopologyError) as exc:
        m.attach("a", r.lease)
    assert exc.value.event == "begin_attach" and "graph[r] == 'idle'" in exc.value.failed
    after = digest(m)
    assert after.pop("refused") == {"begin_attach": 1}
    before.pop("refused")
    assert after == before  # atomic: no page joined a's block table, no pin moved, nothing fired
    m.uncapture(["a"])
    assert m.attach("a", r.lease) == 12
    m.release(r.lease)
    m.check_integrity()


def test_a_refused_quantifier_over_readers_names_the_reader(make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(host_pages=8)
    m.register("b", toks(100, 8))
    m.register("a", toks(0, 12))
    pages = m.sequence_pages("a")
    m.capture(["a"])
    m.offload(pages[0], "host")
    with pytest.raises(TopologyError) as exc:
        m.prefetch(pages[0])  # a captured reader holds the page: its graph's addresses must not move
    assert exc.value.page == pages[0] and "for s in readers" in exc.value.failed
    assert exc.value.detail == "false for s = reader 'a': block[s, p]='in', graph[s]='captured'", exc.value.detail
    m.uncapture(["a"])
    m.check_integrity()


def test_attach_with_another_readers_lease_pins_for_itself_meanwhile(
        make_manager: Callable[..., CacheManager]) -> None:
    m = make_manager(record=True)
    m.register("w", toks(0, 9))
    r = m.lookup(toks(0, 8))  # an anonymous reader's lease
    assert isinstance(r, Ready)
    m.register("a")
    assert m.attach("a", r.lease) == 8
    assert [m.page_state(p)["pin"] for p in r.lease.pages] == [1, 1]  # a's own pins came and went
    events = [s.event for s in m.steps()]
    assert events[-8:] == ["begin_attach", "acquire", "acquire", "attach", "attach", "release_last", "release_last",
                           "end_attach"]
    m.release(r.lease)
    m.check_integrity()


def _promised(m: CacheManager, lease: Lease, tokens: list[int]) -> list[bytes]:
    """The bytes each pinned page of ``lease`` must hold while it re-validates, from the tokens the test
    itself wrote or asked for (``tokens``: the sequence's or the lookup's), not from the runtime's state."""
    out = []
    for i in range(len(lease.pinned)):
        n = m.C if i < len(lease.pages) else lease.tokens - len(lease.pages) * m.C
        out.append(expected_payload(tokens[i * m.C: i * m.C + n], i, m.C)[: n * 8])
    return out


def test_freeing_under_held_leases_and_reusing_page_ids_keeps_every_row_true() -> None:
    """Random sequences, leases taken by lookups and by the sequences themselves, sequences freed
    while leases are held, page ids reused by new sequences: every kernel-lease row either
    re-validates and holds exactly the bytes promised (partial last pages included), or is refused."""
    rng = random.Random(5)
    m = CacheManager(config=RuntimeConfig(page_size=4, window=8, gpu_pages=40, host_pages=0, pool_capacity=6))
    held: list[tuple[Lease, list[bytes]]] = []
    written: dict[str, list[int]] = {}  # every live sequence's tokens, as the test wrote them
    seen: set[int] = set()
    gone: set[int] = set()
    reused: set[int] = set()
    checked = refused = 0
    for i in range(400):
        op = rng.randrange(6)
        try:
            if op == 0 or not written:
                sid = f"s{i}"
                tokens = [rng.randrange(6) for _ in range(rng.randrange(1, 14))]
                m.register(sid, tokens)
                written[sid] = tokens
            elif op == 1:
                sid = rng.choice(sorted(written))
                lease = m.acquire(sid)
                held.append((lease, _promised(m, lease, written[sid])))
            elif op == 2:
                query = [rng.randrange(6) for _ in range(rng.randrange(4, 14))]
                r = m.lookup(query)
                if isinstance(r, Ready):
                    held.append((r.lease, _promised(m, r.lease, query)))
            elif op == 3:
                sid = sorted(written)[rng.randrange(len(written))]
                m.free(sid)
                del written[sid]
            elif op == 4 and held:
                m.release(held.pop(rng.randrange(len(held)))[0])
            else:
                sid = rng.choice(sorted(written))
                more = [rng.randrange(6) for _ in range(rng.randrange(1, 6))]
                m.append(sid, more)
                written[sid] += more
        except MorphcacheError:
            pass
        now = set(m.page_ids())
        reused |= now & gone
        gone = (gone | (seen - now)) - now
        seen = now
        for lease, promised in held:
            kl = m.kernel_lease([lease])
            try:
                kl.check_live()
            except StaleLeaseError:
                refused += 1
                continue
            slots = [int(s) for s in kl.block_table[0].tolist() if s >= 0]
            for slot, want in zip(slots, promised, strict=True):
                assert m.store.read(slot)[: len(want)] == want  # type: ignore[attr-defined]
            checked += 1
        m.check_integrity()
    assert checked > 500 and refused > 20, (checked, refused)
    assert len(reused) > 10, "page ids forgotten and given out again"
    m.close()


def test_the_spec_refuses_to_forget_a_pinned_page() -> None:
    """The collector proposes ``forget`` only for pages nothing holds; the spec's guard disposes on its
    own: asked directly to forget a freed sequence's partial page that a lease still pins, it refuses
    on the pin and changes nothing (so dropping ``pin[p] == 0`` from the spec's guard fails here)."""
    m = CacheManager(config=RuntimeConfig(page_size=4, window=8, gpu_pages=32))
    m.register("a", [1, 2, 3, 4, 5, 6])
    lease = m.acquire("a")
    tail = lease.tail
    assert tail is not None
    m.free("a")
    before = m.page_state(tail)
    with pytest.raises(GuardRefused) as exc:
        m.parts.pipe.fire("forget", None, tail)
    assert exc.value.failed == "pin[p] == 0"
    assert m.page_state(tail) == before
    m.release(lease)
    m.check_integrity()
    m.close()
