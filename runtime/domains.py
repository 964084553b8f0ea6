"""Where a quantifier ranges in the runtime: the readers that touch a page, the pages a reader touches.

The spec quantifies over every page and every reader of its instance; the runtime has an open-ended
id space and evaluates each quantifier over a *domain* outside which the body is neutral::

    all(implies(block[r, q] == 'in', depth[q] * C < frontier[r]) for q in pages)
        body with block[r, q] at its initial value 'out':  implies(False, ...)  ==  True
        -> ranges over the pages in r's block[r, *] entries            (kind "reader_pages", key r)

    all(block[s, p] == 'out' for s in readers)
        body with block[s, p] at 'out':  True
        -> ranges over the readers with an entry block[s, p]           (kind "page_readers", key p)

    sum(1 if pool[q] == 'pooled' else 0 for q in pages)
        body of an untouched page: 0; reads only pool[q]
        -> an aggregate over live pages, maintained incrementally      (kind "aggregate")

The check is made once, at compile time, by substituting the initial values and simplifying
(``irtools.simplify``).  When it fails the domain is every live page (or reader) and ``exact`` is
False: such a body is not neutral on untouched ids, and the runtime's reading of it (live ids only)
is recorded as inexact.  A sparse per-(reader, page) entry disappears when it returns to its initial
value, so "touches" is exactly "has an entry".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from morphcache.spec.expr import Const, Expr, Index, Name, Reduce, Value, rebuild, render, walk
from morphcache.spec.model import PAGE, READER, READER_PAGE, Spec

from .errors import ConfigError
from .irtools import free_names, is_neutral, replace_index, simplify

READER_PAGES, PAGE_READERS, LIVE_PAGES, LIVE_READERS = "reader_pages", "page_readers", "live_pages", "live_readers"


@dataclass(frozen=True)
class Domain:
    """A quantifier's runtime range: ``names[name]`` is bound to it when an expression runs."""

    name: str
    kind: str
    key: str | None = None  # the name whose value selects the range (r or s for reader_pages, p or q ...)
    vars: tuple[str, ...] = ()  # the per-(reader, page) variables whose entries make the range
    exact: bool = True


@dataclass(frozen=True)
class Aggregate:
    """``kind(body for var in pages)`` over every live page, with a body that reads only ``x[var]``."""

    name: str
    kind: str
    var: str
    body: Expr
    text: str
    reads: frozenset[str]


@dataclass
class DomainTable:
    """The domains and aggregates of one compiled spec (deduplicated)."""

    spec: Spec
    domains: dict[str, Domain] = field(default_factory=dict)
    aggregates: dict[str, Aggregate] = field(default_factory=dict)
    init: Mapping[str, Value] = field(default_factory=dict)

    def __post_init__(self) -> None:
        init: dict[str, Value] = {n: d.init for n, d in self.spec.vars.items()}
        init.update({n: o.initial for n, o in self.spec.objects.items()})
        self.init = init

    # -- registration ----------------------------------------------------------------------------
    def _domain(self, kind: str, key: str | None, names: tuple[str, ...], exact: bool) -> str:
        for d in self.domains.values():
            if (d.kind, d.key, d.vars, d.exact) == (kind, key, names, exact):
                return d.name
        name = f"@dom{len(self.domains)}"
        self.domains[name] = Domain(name, kind, key, names, exact)
        return name

    def _aggregate(self, r: Reduce, text: str) -> str:
        for agg in self.aggregates.values():
            if agg.text == text:
                return agg.name
        name = f"@agg{len(self.aggregates)}"
        reads = frozenset(n.name for n in walk(r.body) if isinstance(n, Index))
        self.aggregates[name] = Aggregate(name, r.kind, r.var, r.body, text, reads)
        return name

    # -- analysis --------------------------------------------------------------------------------
    def restrict(self, e: Expr, aggregates: bool = True) -> Expr:
        """``e`` with every reduction ranging over a named runtime domain (inner ones first), and page
        reductions that qualify replaced by aggregate names (when ``aggregates``)."""
        def visit(node: Expr) -> Expr:
            if isinstance(node, Reduce):
                body = self.restrict(node.body, aggregates)
                red = Reduce(node.kind, node.var, body, node.loc, node.domain)
                return self._classify(red, aggregates)
            return rebuild(node, visit)

        return visit(e)

    def _scope(self, name: str) -> str:
        return self.spec.scope_of(name)

    def _initial(self, node: Index) -> Const:
        return Const(self.init[node.name], node.loc)

    def _classify(self, r: Reduce, aggregates: bool) -> Expr:
        var, body = r.var, r.body
        bound_inside = {n.var for n in walk(body) if isinstance(n, Reduce)}
        if r.domain == "pages":
            rp = [n for n in walk(body) if isinstance(n, Index) and self._scope(n.name) == READER_PAGE
                  and _is(n.args[1], var)]
            keys = {_name(n.args[0]) for n in rp}
            if rp and len(keys) == 1 and None not in keys and not (keys & bound_inside):
                sub = replace_index(body, lambda n: self._initial(n) if n in rp else None)
                if is_neutral(sub, r.kind):
                    names = tuple(sorted({n.name for n in rp}))
                    return _ranged(r, self._domain(READER_PAGES, keys.pop(), names, True))
            untouched = replace_index(body, lambda n: self._initial(n) if self._at(n, var, PAGE) else None)
            neutral = is_neutral(untouched, r.kind)
            if neutral and aggregates and self._page_local(body, var):
                return Name(self._aggregate(r, render(r)), r.loc)
            return _ranged(r, self._domain(LIVE_PAGES, None, (), neutral))
        rp = [n for n in walk(body) if isinstance(n, Index) and self._scope(n.name) == READER_PAGE
              and _is(n.args[0], var)]
        keys = {_name(n.args[1]) for n in rp}
        if rp and len(keys) == 1 and None not in keys and not (keys & bound_inside):
            sub = replace_index(body, lambda n: self._initial(n) if n in rp else None)
            if is_neutral(sub, r.kind):
                names = tuple(sorted({n.name for n in rp}))
                return _ranged(r, self._domain(PAGE_READERS, keys.pop(), names, True))
        untouched = replace_index(body, lambda n: self._initial(n) if self._at(n, var, READER) else None)
        return _ranged(r, self._domain(LIVE_READERS, None, (), is_neutral(untouched, r.kind)))

    def _at(self, n: Index, var: str, dim: str) -> bool:
        """Whether ``n`` is a value of the page (``dim`` PAGE) or reader bound as ``var``."""
        scope = self._scope(n.name)
        if dim == PAGE:
            return (scope == PAGE and _is(n.args[0], var)) or (scope == READER_PAGE and _is(n.args[1], var))
        return (scope == READER and _is(n.args[0], var)) or (scope == READER_PAGE and _is(n.args[0], var))

    def _page_local(self, body: Expr, var: str) -> bool:
        if free_names(body) - {var}:
            return False
        return all(self._scope(n.name) == PAGE and len(n.args) == 1 and _is(n.args[0], var)
                   for n in walk(body) if isinstance(n, Index)) and not any(
            isinstance(n, Reduce) for n in walk(body))

    def star(self, target: str, index: str, value: Expr) -> Domain:
        """The range of the ``*`` in an effect ``target[index] := value`` (``q`` over pages or ``s`` over
        readers): where writing ``value`` can give something other than ``target``'s initial value."""
        parts = index.split(",")
        if parts.count("*") != 1:
            raise ConfigError(f"effect on '{target}[{index}]': the runtime supports one '*' per effect")
        scope = self._scope(target)
        over_pages = scope == PAGE or (scope == READER_PAGE and parts[1] == "*")
        var = "q" if over_pages else "s"
        init = Const(self.init[target])
        dim = PAGE if over_pages else READER
        pos = 1 if over_pages else 0
        rp = [n for n in walk(value) if isinstance(n, Index) and self._scope(n.name) == READER_PAGE
              and _is(n.args[pos], var)]
        keys = {_name(n.args[1 - pos]) for n in rp}
        if rp and len(keys) == 1 and None not in keys:
            sub = simplify(replace_index(value, lambda n: self._initial(n) if n in rp else None))
            if isinstance(sub, Const) and sub.value == init.value:
                names = tuple(sorted({n.name for n in rp}))
                return self.domains[self._domain(READER_PAGES if over_pages else PAGE_READERS, keys.pop(), names,
                                                 True)]
        sub = simplify(replace_index(value, lambda n: self._initial(n) if self._at(n, var, dim) else None))
        exact = isinstance(sub, Const) and sub.value == init.value
        return self.domains[self._domain(LIVE_PAGES if over_pages else LIVE_READERS, None, (), exact)]


def _ranged(r: Reduce, domain: str) -> Reduce:
    return Reduce(r.kind, r.var, r.body, r.loc, domain)


def _is(e: Expr, name: str) -> bool:
    return isinstance(e, Name) and e.name == name


def _name(e: Expr) -> str | None:
    return e.name if isinstance(e, Name) else None
