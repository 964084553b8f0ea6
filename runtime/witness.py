"""Witnesses: which page (or reader) a refused quantifier failed for.

A guard conjunct ``all(body for q in pages)`` that is false is false for some ``q``; a refusal that
names only the conjunct leaves the engineer to search for it.  ``Witness.first`` finds the first id of
the domain whose body is false, with the closures, on the refusal path only (a refusal is rare, a
domain is the reader's pages or a page's holders)::

    end_attach refused on page 5 (block 1) in reader 'b': 'all(... for q in pages)' is false; ...
        (false for q = page 5: block[r, q]='in', depth[q]=1, frontier[r]=8, window[q]='expired')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from morphcache.spec.expr import PAGES, Expr, Reduce
from morphcache.spec.interp import Compiled, compile_expr

from .domains import LIVE_PAGES, READER_PAGES, Domain

WITNESS_RANGE = 1 << 16  # the largest count-domain a refusal searches for its witness


@dataclass(frozen=True)
class Witness:
    """For a conjunct ``all(body for var in domain)``: ``first(names, arrays)`` is the first id of the
    domain whose body is false (None when there is none), ``reads`` what the body reads: what a refusal
    shows so that it names the page (or reader) the quantifier failed on."""

    var: str
    domain: str
    over_pages: bool  # the ids are pages (else readers)
    reads: frozenset[str]
    body: Compiled

    @staticmethod
    def of(e: Expr, reads_of: Callable[[Expr], frozenset[str]], domains: Mapping[str, Domain]) -> Witness | None:
        """The witness finder of ``e`` (closures), None unless ``e`` is an ``all``."""
        if not isinstance(e, Reduce) or e.kind != "all":
            return None
        dom = domains.get(e.domain)
        over_pages = e.domain == PAGES if dom is None else dom.kind in (READER_PAGES, LIVE_PAGES)
        return Witness(e.var, e.domain, over_pages, reads_of(e.body), compile_expr(e.body))

    def first(self, names: Mapping[str, Any], arrays: Mapping[str, Any]) -> int | None:
        scope = dict(names)
        ids = names[self.domain]
        if callable(ids):
            ids = ids(names)
        if isinstance(ids, int):
            if ids > WITNESS_RANGE:  # a capacity, not a set of ids: no search
                return None
            ids = range(ids)
        for q in ids:
            scope[self.var] = q
            if not self.body(scope, arrays):
                return int(q)
        return None
