"""Views: the spec's one-sequence state, seen through the block table of one sequence.

The spec describes one sequence whose page ``p`` covers tokens ``[p*C, (p+1)*C)``.  The runtime has
many sequences sharing physical pages; a view makes one of them look like the spec's sequence::

    sequence "a"   block table  [ 7, 3, 12 ]    frontier 41   (C = 16)
    view names     {C: 16, W: 64, ..., frontier: 41, graph: 'idle', cap_pages: 0, pages: 3}
    view arrays    tail[1] -> cols['tail'][3]     (block index 1 -> page id 3)

Kinds of view:

- a *sequence view*, persistent, kept in step with the sequence (its names *are* the sequence's
  system state);
- a *detached view*, for a page no live sequence holds: the chain of its ancestors, ending with the
  page, with the frontier at the end of the page;
- the *global view*: every page id of the manager, block index = page id, used for events with a
  global meaning (admission to the shared pool) and for invariants that read no system state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .compiler import CompiledSpec


class Col(Sequence[Any]):
    """One column seen through a block table: ``col[i]`` is the value of the page at block ``i``."""

    __slots__ = ("col", "block")

    def __init__(self, col: list[Any], block: list[int]) -> None:
        self.col = col
        self.block = block

    def __getitem__(self, i: Any) -> Any:
        if i < 0:
            raise IndexError(f"block index {i} is negative")
        return self.col[self.block[i]]

    def __len__(self) -> int:
        return len(self.block)


class View:
    """Names and arrays for ``compile_expr`` closures, plus the block table behind them."""

    __slots__ = ("label", "names", "arrays", "block", "is_global")

    def __init__(self, label: str, names: dict[str, Any], arrays: Mapping[str, Sequence[Any]],
                 block: list[int], is_global: bool = False) -> None:
        self.label = label
        self.names = names
        self.arrays = arrays
        self.block = block
        self.is_global = is_global

    def page_at(self, q: int) -> int:
        """The page id at block index ``q``."""
        return q if self.is_global else self.block[q]

    @property
    def pages(self) -> int:
        """Page count of the view."""
        return int(self.names["pages"])

    def snapshot(self, cspec: CompiledSpec) -> dict[str, Any]:
        """The whole view as a conformance state: ``name`` for system state, ``name[i]`` per page."""
        out: dict[str, Any] = {name: self.names[name] for name in cspec.system_names}
        n = self.pages
        out["pages"] = n
        for name in cspec.page_names:
            col = self.arrays[name]
            for i in range(n):
                out[f"{name}[{i}]"] = col[i]
        return out


def sequence_view(label: str, cspec: CompiledSpec, cols: Mapping[str, list[Any]], block: list[int],
                  system: Mapping[str, Any] | None = None) -> View:
    """A view over ``block`` with the spec's initial system state (or ``system``) and runtime constants."""
    names: dict[str, Any] = {**cspec.constants, **cspec.system_init, **(system or {})}
    names["pages"] = len(block)
    arrays = {name: Col(col, block) for name, col in cols.items()}
    return View(label, names, arrays, block)
