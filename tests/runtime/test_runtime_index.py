"""The prefix index: the vector chain keys equal the scalar seal hash, the key table mirrors its dict,
and a hash collision never serves another prefix's pages."""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from morphcache.runtime import CacheManager, Miss, NeedsRecovery, Ready, chainhash
from morphcache.runtime import index as index_module
from morphcache.runtime.chainhash import ROOT_HASH, chain_hash, chain_keys, run_keys
from morphcache.runtime.index import PrefixIndex, SealedRows, token_array
from morphcache.runtime.keytable import KeyTable

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
TOKEN = st.one_of(st.integers(0, 70_000), U64, st.sampled_from([0, 1, (1 << 32) - 1, 1 << 32, (1 << 64) - 1]))


@st.composite
def pages(draw: st.DrawFn) -> tuple[int, list[list[int]]]:
    c = draw(st.sampled_from([1, 2, 3, 5, 7, 16, 64]))
    n = draw(st.integers(0, 9))
    return c, [draw(st.lists(TOKEN, min_size=c, max_size=c)) for _ in range(n)]


@settings(max_examples=60, deadline=None)
@given(pages(), U64)
def test_vector_keys_equal_the_scalar_seal_hash(case: tuple[int, list[list[int]]], root: int) -> None:
    c, rows = case
    table = np.array(rows, dtype=np.uint64).reshape(len(rows), c)
    keys = chain_keys(table, root).tolist()
    h, want = root, []
    for row in rows:
        h = chain_hash(h, row)
        want.append(h)
    assert keys == want
    weights = chainhash._weights(c)[0]
    reference = [sum(t * w for t, w in zip(row, weights, strict=True)) % (1 << 64) for row in rows]
    assert [chainhash.page_digest(row) for row in rows] == chainhash.page_digests(table).tolist() == reference


def test_one_token_changed_changes_the_digest() -> None:
    rng = random.Random(3)
    for c in (1, 4, 16):
        base = [rng.randrange(1 << 64) for _ in range(c)]
        for j in range(c):
            other = list(base)
            other[j] = (other[j] + rng.randrange(1, 1 << 64)) % (1 << 64)
            assert chainhash.page_digest(other) != chainhash.page_digest(base)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40), U64), max_size=300), st.integers(1, 3))
def test_key_table_mirrors_a_dict(ops: list[tuple[bool, int, int]], bits: int) -> None:
    """Adds and removes against a dict, with keys that share slots (a small table, keys equal but for
    their top or low bits, key 0, the keys vacant slots hold)."""
    table, ref = KeyTable(bits), {}
    for pid, (add, pick, key) in enumerate(ops):
        near = [0, 1 << 63, (pick << 58) | 5, (pick << 58) | 9, (3 << 58) | pick, ((pick ^ 1) << 62)]
        key = near[pick % len(near)] % (1 << 64) if pick < 24 else key
        if add and key not in ref:
            table.add(key, pid)
            ref[key] = pid
        elif not add and key in ref:
            table.remove(key)
            del ref[key]
    assert table.problems(ref) == []
    probe = np.array(list(ref) + [0, 1, 2, (1 << 64) - 1], dtype=np.uint64)
    assert table.find(probe).tolist() == [ref.get(int(k), -1) for k in probe.tolist()]
    # candidates: the page at the key's hi slot where the key is there, else the page at its lo slot
    slots = [table._slots(int(k)) for k in probe.tolist()]
    want = [int(table.pages[hi]) if int(table.keys[hi]) == k else int(table.pages[lo])
            for k, (hi, lo) in zip(probe.tolist(), slots, strict=True)]
    assert table.candidates(probe).tolist() == want



@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=200), st.integers(1, 3), st.randoms(use_true_random=False))
def test_key_table_remove_many_one_at_a_time_and_vectorized(picks: list[int], bits: int, rng: random.Random) -> None:
    """``remove_many`` by the scalar loop and by the vector pass leave the table as ``remove`` one at a
    time does (keys sharing slots, keys absent)."""
    near = [(p << 58) | 5 for p in range(8)] + [(3 << 58) | p for p in range(8)] + [0, 1 << 63]
    keys = list(dict.fromkeys(near[p % len(near)] if p < 18 else rng.randrange(1 << 64) for p in picks))
    gone = rng.sample(keys, rng.randrange(len(keys) + 1)) + [k for k in ((1 << 64) - 1, 7 << 58) if k not in keys]
    tables = [KeyTable(bits) for _ in range(3)]
    for table in tables:
        for pid, key in enumerate(keys):
            table.add(key, pid)
    for key in gone:
        tables[0].remove(key)
    for table, loop_up_to in zip(tables[1:], (1 << 20, 0), strict=True):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("morphcache.runtime.keytable.LOOP_UP_TO", loop_up_to)
            table.remove_many(gone)
        assert table.live == tables[0].live
        assert table.keys.tolist() == tables[0].keys.tolist()
        assert table.pages.tolist() == tables[0].pages.tolist()

@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=200), st.integers(1, 3), st.randoms(use_true_random=False))
def test_key_table_add_many_is_add_one_at_a_time(picks: list[int], bits: int, rng: random.Random) -> None:
    """``add_many`` leaves the table as ``add`` one at a time does: the same slots, the same growth
    (keys sharing slots, so that some go through the moves and some are left homeless)."""
    near = [(p << 58) | 5 for p in range(8)] + [(3 << 58) | p for p in range(8)] + [0, 1 << 63]
    keys = list(dict.fromkeys(near[p % len(near)] if p < 18 else rng.randrange(1 << 64) for p in picks))
    start = rng.randrange(len(keys) + 1)  # some entered before, one at a time, in both tables
    one, many = KeyTable(bits), KeyTable(bits)
    for table in (one, many):
        for pid, key in enumerate(keys[:start]):
            table.add(key, pid)
    for pid, key in enumerate(keys[start:], start):
        one.add(key, pid)
    many.add_many(keys[start:], list(range(start, len(keys))))
    assert (many.bits, many.live) == (one.bits, one.live)
    assert many.keys.tolist() == one.keys.tolist()
    assert many.pages.tolist() == one.pages.tolist()


def _constant_digest(monkeypatch: pytest.MonkeyPatch, value: int) -> None:
    """Every page digest ``value``: the keys say only the depth, every key at a depth collides."""
    monkeypatch.setattr(chainhash, "page_digest", lambda tokens: value)
    monkeypatch.setattr(chainhash, "page_digests",
                        lambda rows: np.full(len(rows), value, dtype=np.uint64))


def test_a_page_with_the_right_tokens_after_another_prefix_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Page 1 holds the request's second page, but after a first page other than the hit's first page:
    the hash-only walk takes it, the verified hit does not; the same for a partial page."""
    _constant_digest(monkeypatch, 7)
    index = PrefixIndex(2)
    p, x, q = [1, 2], [3, 4], [5, 6]
    k0 = chain_hash(ROOT_HASH, p)
    k1 = chain_hash(k0, x)
    assert chain_hash(ROOT_HASH, q) == k0  # the collision
    index.seal(0, -1, p)
    index.add_sealed(k0, 0)
    index.seal(1, 0, x)
    index.add_sealed(k1, 1)
    index.seal(2, -1, q)  # q's page takes over the colliding entry
    index.remove_sealed(k0, 0)
    index.add_sealed(k0, 2)
    assert index.chain(q + x) == [2, 1] and index.nominal(q + x).full == (2,)
    assert index.chain(p + x) == [2, 1] and index.nominal(p + x).full == ()  # page 2 is not p
    index.add_child(k0, 3, [3, 9], 0)  # continues page 0 (p), filed under the same hash
    hit = index.nominal(q + [3])
    assert (hit.full, hit.partial, hit.tokens) == ((2,), None, 2)
    index.add_child(k0, 4, [3, 8], 2)  # continues page 2 (q)
    hit = index.nominal(q + [3])
    assert (hit.full, hit.partial, hit.tokens) == ((2,), 4, 3)
    index.seal(5, 2, x)  # a page written twice: same tokens after the same prefix, one class
    assert index.sealed.cls[5] != index.sealed.cls[1] and index.sealed.pcls[5] == index.sealed.cls[2]
    index.remove_sealed(k1, 1)
    index.add_sealed(k1, 5)
    assert index.nominal(q + x).full == (2, 5)
    index.forget(5)
    assert index.sealed.problems({0: (-1, p), 1: (0, x), 2: (-1, q)}) == []


def _prefix(m: CacheManager, pid: int) -> list[int]:
    """The tokens of ``pid``'s whole chain, root first (what its KV was computed from)."""
    chain = []
    while pid >= 0:
        rec = m.parts.pages.records[pid]
        chain.append(list(rec.token_ids))
        pid = rec.parent
    return [t for page in reversed(chain) for t in page]


@pytest.mark.parametrize("constant", [True, False])
def test_colliding_keys_never_serve_another_prefix(make_manager: Callable[..., CacheManager],
                                                   monkeypatch: pytest.MonkeyPatch, constant: bool) -> None:
    """With every page digest a constant, every key at a depth collides: lookups of prompts sharing
    pages at some depths, not whole prefixes, are served only what they really share."""
    if constant:
        _constant_digest(monkeypatch, 11)
    m = make_manager(gpu_pages=64, pool_capacity=48, host_pages=32)
    rng = random.Random(5)
    vocab = [[rng.randrange(4) for _ in range(4)] for _ in range(3)]  # pages drawn from a few candidates
    served = 0
    for i in range(40):
        prompt = [t for _ in range(rng.randrange(1, 6)) for t in rng.choice(vocab)] + [rng.randrange(4)]
        res = m.lookup(prompt, owner=None)
        if isinstance(res, NeedsRecovery):
            m.recover(res.plan)
            res = m.lookup(prompt, limit=res.plan.effective)
        if isinstance(res, Ready):
            lease = res.lease
            for block, pid in enumerate(lease.pages):
                assert _prefix(m, pid) == prompt[:4 * (block + 1)]
            if lease.partial is not None:
                assert list(lease.partial.tokens) == prompt[4 * len(lease.pages):lease.tokens]
                assert _prefix(m, lease.partial.source)[:lease.tokens] == prompt[:lease.tokens]
            served += lease.tokens
            m.release(lease)
        else:
            assert isinstance(res, Miss)
        m.register(f"s{i}", prompt)
        if i % 3:
            m.free(f"s{i}")
        m.check_integrity()
    assert served > 0


@pytest.mark.parametrize("seed", range(4))
def test_partial_search_and_duplicates_answer_in_open_order(seed: int) -> None:
    """The continuations filed by first token (lazily, for pages opened empty) and by hash give the
    answers a scan of every page continuing the hash, in open order, gives: the first opened of the
    longest partial matches, the first opened sealed duplicate."""
    rng = random.Random(seed)
    c = 4
    index = PrefixIndex(c)
    live: dict[int, tuple[int, list[int]]] = {}  # pid -> (parent hash, tokens)
    scan: dict[int, dict[int, list[int]]] = {}  # the reference: parent hash -> {pid: tokens} in open order
    hashes: dict[int, int] = {}
    parents = [ROOT_HASH, 11, 12]
    for step in range(600):
        op = rng.random()
        if op < 0.35 or not live:
            pid = max(live, default=-1) + 1 if rng.random() < 0.5 else rng.randrange(200)
            if pid in live:
                continue
            h = rng.choice(parents)
            toks = [rng.randrange(3) for _ in range(rng.choice([0, 0, 1, 2]))]
            index.add_child(h, pid, toks, -1)
            live[pid] = (h, toks)
            scan.setdefault(h, {})[pid] = toks
        elif op < 0.65:
            pid = rng.choice(list(live))
            toks = live[pid][1]
            if len(toks) < c:
                toks.append(rng.randrange(3))
                if len(toks) == c and pid not in hashes:
                    hashes[pid] = hash((live[pid][0], tuple(toks))) % 7  # few hashes: many duplicates
                    index.add_sealed(hashes[pid], pid)
        elif op < 0.8:
            pid = rng.choice(list(live))
            h = live.pop(pid)[0]
            kids = scan[h]
            del kids[pid]
            if not kids:
                del scan[h]
            gone = hashes.pop(pid, None)
            want_dup = None
            if gone is not None and index.by_hash.get(gone) == pid:
                want_dup = next((o for o in kids if hashes.get(o) == gone), None)
                index.remove_sealed(gone, pid)
                got = index.kids.duplicate(gone, h, pid, hashes.get)
                assert got == want_dup
                if got is not None:
                    index.add_sealed(gone, got)
            index.remove_child(h, pid)
            index.forget(pid)
        else:
            query = [rng.randrange(3) for _ in range(rng.randrange(1, c))]
            best, best_len = None, 0
            for pid, stored in scan.get(ROOT_HASH, {}).items():
                m = 0
                while m < min(len(query), len(stored)) and query[m] == stored[m]:
                    m += 1
                if min(m, c - 1) > best_len:
                    best, best_len = pid, min(m, c - 1)
            hit = index.nominal(query)
            assert (hit.partial, hit.partial_len) == (best, best_len), step


_ITEMS = st.one_of(st.integers(-3, 2**64 + 3), st.booleans(), st.integers(0, 9).map(np.uint64),
                   st.sampled_from([1.5, "a", None]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 2**64 - 1), _ITEMS), max_size=12))
def test_token_array_of_a_list_is_the_constructors(items: list[object]) -> None:
    """A list goes in by ``fromlist``, a tuple by the constructor (the second time from what the first
    kept): the same words as ``array("Q", items)``, the same error type."""
    try:
        want: object = array("Q", items)  # type: ignore[arg-type, type-var]
    except (TypeError, OverflowError) as exc:
        want = type(exc)
    for seq in (items, tuple(items), tuple(items)):  # a list, a tuple, another tuple of the same items
        try:
            got: object = token_array(seq)  # type: ignore[arg-type]
        except (TypeError, OverflowError) as exc:
            got = type(exc)
        assert got == want


def test_a_tuple_converted_again_is_a_copy_of_its_words() -> None:
    """The tuple converted last is given again as a fresh copy of its words: what the caller does to
    one array never reaches the next."""
    tokens = tuple(range(40))
    first = token_array(tokens)
    first[0] = 99
    again = token_array(tokens)
    assert again == array("Q", tokens) and again is not first
    assert token_array(tuple(range(1, 41))) == array("Q", range(1, 41))
    assert token_array(tokens) == array("Q", tokens)


@pytest.mark.parametrize("constant", [True, False])
def test_the_walk_and_the_vector_pass_find_the_same_hit(make_manager: Callable[..., CacheManager],
                                                        monkeypatch: pytest.MonkeyPatch, constant: bool) -> None:
    """The first pages walked one at a time, the rest by the vector pass, or all of them either way:
    the same nominal hit for every request of a workload of shared and colliding prefixes."""
    if constant:
        _constant_digest(monkeypatch, 13)
    m = make_manager(gpu_pages=96, pool_capacity=64, host_pages=32)
    index = m.parts.index
    rng = random.Random(11)
    served = 0
    vocab = [[rng.randrange(3) for _ in range(4)] for _ in range(3)]
    for i in range(60):
        prompt = [t for _ in range(rng.randrange(1, 9)) for t in rng.choice(vocab)]
        prompt += [rng.randrange(3)] * rng.randrange(3)
        for limit in (None, rng.randrange(len(prompt) + 1)):
            answers = set()
            for walk in (0, 1, 2, 5, 1 << 30):  # 0: the vector pass alone; 1 << 30: the walk alone
                monkeypatch.setattr(index_module, "WALK_PAGES", walk)
                hit = index.nominal(token_array(prompt), limit)
                answers.add((hit.full, hit.partial, hit.partial_len, hit.tokens))
            assert len(answers) == 1, (i, limit, answers)
            served += len(hit.full)
        m.register(f"s{i}", prompt)
        if i % 3:
            m.free(f"s{i}")
    m.check_integrity()
    assert served > 40  # many whole pages served


def _sealed(rows: SealedRows) -> dict[int, tuple[list[int], int, int]]:
    """Each sealed page's row, class and parent class (the tables' sizes aside: they grow apart)."""
    return {pid: (rows.rows[pid].tolist(), int(rows.cls[pid]), int(rows.pcls[pid]))
            for pid in range(len(rows.cls) - 1) if rows.cls[pid]}


@pytest.mark.parametrize("seed", range(8))
def test_sealed_runs_are_classed_as_one_by_one(seed: int) -> None:
    """``SealedRows.seal_many`` of runs (each page after the one before it, some repeating a prefix
    sealed before, so their new classes start anywhere in the run, or nowhere) and of scattered pages
    leaves the rows, classes and interned keys ``seal`` one at a time leaves, forgets included."""
    rng = random.Random(seed)
    one, many = SealedRows(3), SealedRows(3)
    vocab = [[rng.randrange(3) for _ in range(3)] for _ in range(3)]
    free, live = list(range(400)), []
    for _ in range(40):
        count = rng.randrange(1, 9)
        pids = [free.pop(rng.randrange(len(free))) for _ in range(count)]
        sealed = [pid for pid in live if one.cls[pid]]
        start = rng.choice([-1, *sealed]) if sealed else -1
        parents = [start, *pids[:-1]] if rng.random() < 0.8 else \
            [rng.choice([-1, *sealed]) for _ in pids]  # a run, or pages after pages sealed before
        tokens = [rng.choice(vocab) if rng.random() < 0.7 else [rng.randrange(3) for _ in range(3)] for _ in pids]
        for pid, parent, toks in zip(pids, parents, tokens, strict=True):
            one.seal(pid, parent, toks)
        many.seal_many(pids, parents, np.array(tokens, dtype=np.uint64))
        live += pids
        gone = [live.pop(rng.randrange(len(live))) for _ in range(rng.randrange(min(4, len(live)) + 1))]
        for pid in gone:
            one.forget(pid)
        many.forget_many(gone)
        free += gone
        assert _sealed(one) == _sealed(many)
        assert (one._intern, one._key_of, one._members, one._next) == \
            (many._intern, many._key_of, many._members, many._next)


@pytest.mark.parametrize("c", [1, 4, 16])
def test_a_writes_keys_short_or_long_are_the_seal_hashes(c: int) -> None:
    """``run_keys`` of short writes (Python ints) and long ones (the vector chain): each page's key is
    what ``chain_hash`` gives it alone, a partial page's first tokens ahead, the tokens a list, a 64-bit
    array or a tuple."""
    rng = random.Random(c)
    for count in [0, 1, 2, 3, 4, 5, 15, 16, 17, 35]:
        for fill in sorted({0, 1, c - 1}):
            root = rng.choice([ROOT_HASH, rng.getrandbits(64)])
            head = [rng.randrange(1 << 64) for _ in range(fill)] if count else []
            tokens = [rng.choice([rng.randrange(1 << 64), rng.randrange(100)])
                      for _ in range(max(0, count * c - len(head)) + rng.randrange(c + 1))]
            flat, want, h = head + tokens, [], root
            for k in range(count):
                h = chain_hash(h, flat[k * c:(k + 1) * c])
                want.append(h)
            for seq in (tokens, array("Q", tokens), tuple(tokens)):
                assert run_keys(root, head, seq, count, c) == want, (count, fill, type(seq))
