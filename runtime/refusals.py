"""Refusals: what the pipeline raises when the spec says no, naming the event, the page, the reader,
the whole guard, the first false conjunct and the values it read (decoded)::

    offload refused on page 7 (block 1) in reader 'a': 'pin[p] == 0' is false; guard: ... (pin[p]=1)

The class says why: PinnedPageError (the conjunct reads a pin the page holds), TopologyError (it
reads a captured graph), DomainError (an effect left a declared bound), GuardRefused otherwise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from .compiler import CompiledEvent, CompiledSpec, Conjunct
from .errors import GuardRefused, PinnedPageError, TopologyError
from .state import StateStore


class Refusals:
    """Builds the refusals of one pipeline (and counts them)."""

    def __init__(self, cspec: CompiledSpec, store: StateStore, refused: Counter[str],
                 describe: Callable[[int | None], str]) -> None:
        self.cspec = cspec
        self.store = store
        self.refused = refused
        self.describe = describe
        self._graph_idle = cspec.codes["graph"]["idle"] if "graph" in cspec.codes else None

    def block(self, p: int | None) -> int | None:
        """The block index (depth) of page ``p``, for messages."""
        return None if p is None or "depth" not in self.store.cols else self.store.page("depth", p)

    def source(self, ev: CompiledEvent, r: int | None, p: int | None, state: int) -> GuardRefused:
        """The owner object is in no state the event leaves from."""
        self.refused[ev.name] += 1
        where = {"page": f"{ev.owner}[p]", "reader": f"{ev.owner}[r]"}.get(ev.scope, f"{ev.owner}[r, p]")
        need = " or ".join(f"'{s}'" for s in sorted(self.cspec.state_names[ev.owner][c] for c in ev.sources))
        shown = self.cspec.state_names[ev.owner][state]
        return GuardRefused(ev.name, p, self.block(p), self.describe(r), f"{where} in {{{need}}}",
                            f"{where} in {{{need}}}", f"{where} is '{shown}'")

    def guard(self, ev: CompiledEvent, r: int | None, p: int | None, n: Mapping[str, Any],
              counted: bool = True) -> GuardRefused:
        """The guard is false under names ``n``: the first false conjunct (found with the closures)."""
        if counted:
            self.refused[ev.name] += 1
        a = self.store.arrays
        failed = next((c for c in ev.conjuncts if not c.gfn(n, a)), None)
        if failed is None:
            return self.conjunct(ev, r, p, ev.guard_text, frozenset())
        witness = failed.witness.first(n, a) if failed.witness is not None else None
        if witness is None:
            return self.conjunct(ev, r, p, failed.text, failed.reads)
        return self.instance(ev, r, p, failed, witness)

    def instance(self, ev: CompiledEvent, r: int | None, p: int | None, failed: Conjunct, at: int) -> GuardRefused:
        """A refusal of quantified conjunct ``failed``, naming ``at``, the first id of its domain it fails
        for (a page or a reader), and the values the quantifier's body read there::

            end_attach refused on page 5 (block 1) in reader 'b': 'all(...)' is false; guard: ...
                (false for q = page 5: block[r, q]='in', depth[q]=1, frontier[r]=8, window[q]='expired')
        """
        w = failed.witness
        assert w is not None
        on_pages = w.over_pages
        qr, qp, names = (r, at, ("r", w.var)) if on_pages else (at, p, (w.var, "p"))
        shown = ", ".join(self.values(w.reads, qr, qp, names=names))
        what = f"page {at}" if on_pages else self.describe(at)
        cls = self.kind(failed.reads, r, p)
        page = at if p is None and on_pages else p
        return cls(ev.name, page, self.block(page), self.describe(r), ev.guard_text, failed.text,
                   f"false for {w.var} = {what}: {shown}")

    def conjunct(self, ev: CompiledEvent, r: int | None, p: int | None, text: str, reads: frozenset[str],
                 prefix: str = "") -> GuardRefused:
        """A refusal of conjunct ``text`` (which reads ``reads``) for reader ``r`` on page ``p``."""
        detail = ", ".join(self.values(reads, r, p))
        cls = self.kind(reads, r, p)
        return cls(ev.name, p, self.block(p), self.describe(r), ev.guard_text, text, prefix + detail)

    def kind(self, reads: frozenset[str], r: int | None, p: int | None) -> type[GuardRefused]:
        """PinnedPageError when the refused conjunct reads a pin the page holds, TopologyError when it
        reads a captured graph, GuardRefused otherwise."""
        if p is not None and "pin" in reads and self.store.page("pin", p) > 0:
            return PinnedPageError
        if "graph" in reads and self._captured(r, p):
            return TopologyError
        return GuardRefused

    def _captured(self, r: int | None, p: int | None) -> bool:
        store, idle = self.store, self._graph_idle
        readers = [r] if r is not None else []
        if p is not None:
            readers += list(store.readers_at(("block",), p)) if "block" in store.rp else []
        return any(store.reader("graph", x) != idle for x in readers if x is not None)

    def values(self, reads: frozenset[str], r: int | None, p: int | None, subscripts: bool = True,
               names: tuple[str, str] = ("r", "p")) -> list[str]:
        """``name[p]='value'`` (``name='value'`` without ``subscripts``) for the state an expression read
        (decoded), for messages; ``names``: how the reader's and the page's subscripts are written."""
        out = []
        scopes, dec = self.cspec.scopes, self.cspec.decode
        sr, sp = (f"[{names[0]}]", f"[{names[1]}]") if subscripts else ("", "")
        srp = f"[{names[0]}, {names[1]}]" if subscripts else ""
        for name in sorted(reads):
            scope = scopes.get(name)
            if scope == "page" and p is not None:
                out.append(f"{name}{sp}={dec(name, self.store.page(name, p))!r}")
            elif scope == "reader" and r is not None:
                out.append(f"{name}{sr}={dec(name, self.store.reader(name, r))!r}")
            elif scope == "reader_page" and r is not None and p is not None:
                out.append(f"{name}{srp}={dec(name, self.store.rp_value(name, r, p))!r}")
        return out
