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

    A key is ``(rest, block, block, ...)``: ``rest`` the slots of no page, then one block per page (its
    per-page slots, then its per-(reader, page) slots), the blocks sorted, so that two states differ
    by a page permutation exactly when their keys agree; the key is the least over the permutations
    of interchangeable readers.  Keys compare ``rest`` first, so only the reader permutations with the
    least ``rest`` need their blocks built.  Every part is one C-level ``itemgetter`` of the state
    (a reader permutation composed into it), and the key function is generated, unrolled.
    """

    def __init__(self, spec: Spec, slots: Sequence[tuple[str, tuple[int, ...]]], pages: bool, readers: bool) -> None:
        pos = {s: i for i, s in enumerate(slots)}
        self.identity = not pages and not readers
        orders = list(itertools.permutations(range(spec.readers))) if readers else [tuple(spec.reader_range())]
        page_of = {i: key[SCOPE_ARGS[spec.scope_of(name)].index("p")]
                   for i, (name, key) in enumerate(slots) if "p" in SCOPE_ARGS[spec.scope_of(name)]}
        groups = [[i for i in range(len(slots)) if page_of.get(i) == page] for page in spec.page_range()] \
            if pages else []
        rest = [i for i in range(len(slots)) if not pages or i not in page_of]
        self.parts: list[tuple[Callable[[State], State], list[Callable[[State], State]]]] = []
        for rr in orders:
            moved = [0] * len(slots)  # the permuted state's slot j is the state's slot moved[j]
            for i, (name, key) in enumerate(slots):
                dims = SCOPE_ARGS[spec.scope_of(name)]
                moved[pos[(name, tuple(rr[k] if d == "r" else k for d, k in zip(dims, key, strict=True)))]] = i
            self.parts.append((shuffle([moved[j] for j in rest]),
                               [shuffle([moved[j] for j in group]) for group in groups]))
        self.key = self._compile()

    def _compile(self) -> Callable[[State], Any]:
        """The key function, unrolled over the reader permutations and page blocks."""
        if self.identity:
            return lambda st: st
        names: dict[str, Any] = {}
        lines = ["def key(st):"]
        keys = []
        for i, (rest, blocks) in enumerate(self.parts):
            names[f"rest{i}"] = rest
            names.update({f"b{i}_{k}": block for k, block in enumerate(blocks)})
            lines.append(f"    a{i} = rest{i}(st)")
            sorted_blocks = f", *sorted(({', '.join(f'b{i}_{k}(st)' for k in range(len(blocks)))},))" if blocks else ""
            keys.append(f"(a{i}{sorted_blocks})")
        if len(self.parts) == 1:
            lines.append(f"    return {keys[0]}")
        else:
            lines.append(f"    least = min({', '.join(f'a{i}' for i in range(len(self.parts)))})")
            lines.append("    best = None")
            for i, key in enumerate(keys):
                lines += [f"    if a{i} == least:", f"        k = {key}", "        if best is None or k < best:",
                          "            best = k"]
            lines.append("    return best")
        exec(compile("\n".join(lines), "<canonical key>", "exec"), names)  # noqa: S102 - no spec text in it
        return cast(Callable[[State], Any], names["key"])


def shuffle(index: list[int]) -> Callable[[State], State]:
    """``st -> tuple(st[i] for i in index)``, at C speed."""
    if not index:
        return lambda st: ()
    if len(index) == 1:
        only = index[0]
        return lambda st: (st[only],)
    return cast(Callable[[State], State], operator.itemgetter(*index))
