"""Symmetry of page and reader ids, and canonical keys of states under it.

Pages (readers) are interchangeable when a page (reader) id is only ever used to subscript, or
compared with ``==``/``!=`` with another id of the same kind: then any permutation of the ids maps
the initial state to itself, the transition relation to itself and every property to itself
(properties quantify over all ids).  States that differ by such a permutation have the same
breadth-first distance from the initial state and satisfy the same properties, so a search needs to
visit only one of them: the one with the least canonical key.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from morphcache.spec.expr import PAGES, READERS, Compare, Expr, Index, Name, Reduce, children
from morphcache.spec.model import SCOPE_ARGS, Spec

State = tuple[Any, ...]


def symmetric_dims(spec: Spec) -> tuple[bool, bool]:
    """``(pages, readers)``: whether page ids (reader ids) are interchangeable in every expression.

    An id variable (``p``, ``r``, a variable bound by ``for q in pages``, the ``q``/``s`` of a
    ``*`` effect) may only subscript directly or be compared with ``==``/``!=`` with another id.
    """
    exprs: list[tuple[Expr, dict[str, str]]] = []
    for ev in spec.events:
        base = {"p": PAGES, "r": READERS}
        exprs.append((ev.guard, base))
        for eff in ev.effects:
            exprs.append((eff.value, {**base, "q": PAGES, "s": READERS}))
            for part in (eff.index or "").split(","):
                if part and part not in ("*", "p", "r"):
                    return False, False
    exprs += [(prop.expr, {"p": PAGES, "r": READERS} if prop.kind == "step" else {}) for prop in spec.properties]
    ok = {PAGES: True, READERS: True}
    for e, ids in exprs:
        _check_ids(spec, e, ids, ok)
    return ok[PAGES], ok[READERS]


def _check_ids(spec: Spec, e: Expr, ids: Mapping[str, str], ok: dict[str, bool]) -> None:  # noqa: C901
    def id_of(x: Expr) -> str | None:
        return ids.get(x.name) if isinstance(x, Name) else None

    if isinstance(e, Reduce):
        _check_ids(spec, e.body, {**ids, e.var: e.domain}, ok)
        return
    if isinstance(e, Name):
        if e.name in ids:
            ok[ids[e.name]] = False  # an id used as a value
        return
    if isinstance(e, Index):
        dims = SCOPE_ARGS[spec.scope_of(e.name)]
        for dim, arg in zip(dims, e.args, strict=True):
            domain = PAGES if dim == "p" else READERS
            if id_of(arg) != domain:
                ok[domain] = False  # a subscript that is not a bare id: p + 1, 0, ...
                _check_ids(spec, arg, ids, ok)
        return
    if isinstance(e, Compare) and e.op in ("==", "!=") and id_of(e.left) is not None \
            and id_of(e.left) == id_of(e.right):
        return
    for c in children(e):
        _check_ids(spec, c, ids, ok)


class Canonical:
    """Canonical keys of states under the permutations of interchangeable page and reader ids.

    Readers: each permutation is applied to the whole tuple.  Pages: instead of every permutation, the
    slots of each page (its per-page slots, then its per-(reader, page) slots) form a block, and the
    blocks are sorted; two states differ by a page permutation exactly when their sorted blocks agree.
    """

    def __init__(self, spec: Spec, slots: Sequence[tuple[str, tuple[int, ...]]], pages: bool, readers: bool) -> None:
        pos = {s: i for i, s in enumerate(slots)}
        self.identity = not pages and not readers
        orders = list(itertools.permutations(range(spec.readers))) if readers else [tuple(spec.reader_range())]
        self.readers: list[Callable[[State], State] | None] = []
        for rr in orders:
            if list(rr) == sorted(rr):
                self.readers.append(None)
                continue
            index = [0] * len(slots)
            for i, (name, key) in enumerate(slots):
                dims = SCOPE_ARGS[spec.scope_of(name)]
                moved = tuple(rr[k] if d == "r" else k for d, k in zip(dims, key, strict=True))
                index[pos[(name, moved)]] = i
            self.readers.append(shuffle(index))
        self.blocks: list[Callable[[State], State]] = []
        self.rest: Callable[[State], State] | None = None
        if pages:
            page_of = {i: key[SCOPE_ARGS[spec.scope_of(name)].index("p")]
                       for i, (name, key) in enumerate(slots) if "p" in SCOPE_ARGS[spec.scope_of(name)]}
            self.blocks = [shuffle([i for i in range(len(slots)) if page_of.get(i) == page])
                           for page in spec.page_range()]
            self.rest = shuffle([i for i in range(len(slots)) if i not in page_of])

    def __call__(self, st: State) -> Any:
        if self.identity:
            return st
        best = None
        for perm in self.readers:
            t = st if perm is None else perm(st)
            key = t if self.rest is None else (self.rest(t), *sorted([block(t) for block in self.blocks]))
            if best is None or key < best:
                best = key
        return best


def shuffle(index: list[int]) -> Callable[[State], State]:
    """``st -> tuple(st[i] for i in index)``, at C speed."""
    if not index:
        return lambda st: ()
    if len(index) == 1:
        only = index[0]
        return lambda st: (st[only],)
    return cast(Callable[[State], State], operator.itemgetter(*index))
