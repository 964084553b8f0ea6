"""The vector backend (numpy, many bindings at once) and the source backend (one Python function per
expression) against the closure backend, on random states.

For every guard, effect value, property and lookup expression of the shipped spec, the many-reader
design and every design of the catalogue: draw a random state of a small instance, evaluate the
expression once per binding of its free ``r``/``p`` (and ``pos``) with the closures and with the
generated source, and once for all bindings with the vector backend; the results must be equal.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from morphcache.spec.expr import Expr, Name, Reduce, rebuild, walk
from morphcache.spec.interp import compile_expr
from morphcache.spec.loader import load_spec
from morphcache.spec.model import PAGE, READER, READER_PAGE, SYSTEM, Spec
from morphcache.spec.pycode import compile_source
from morphcache.spec.vector import compile_vector, per_binding

ROOT = Path(__file__).resolve().parents[2] / "spec"
SPECS = [ROOT / "hybrid.yaml", ROOT / "hybrid_single.yaml", *sorted((ROOT / "designs").glob("*.yaml")),
         *sorted((ROOT / "examples").glob("*.yaml"))]
PAGES, READERS = 3, 2


def _expressions(spec: Spec) -> list[tuple[str, Expr]]:
    out: list[tuple[str, Expr]] = []
    for ev in spec.events:
        out.append((f"{ev.name}.guard", ev.guard))
        out += [(f"{ev.name}.{eff.target}[{eff.index}]", eff.value) for eff in ev.effects]
    out += [(f"property {p.name}", p.expr) for p in spec.properties]
    lk = spec.lookup
    for obj in lk.objects:
        out += [(f"needed[{obj}]", lk.needed[obj]), (f"ready[{obj}]", lk.ready[obj])]
        out += [(f"recovery[{obj}][{path}]", e) for path, e in lk.recovery.get(obj, {}).items()]
    return out


LOADED = {path.name: load_spec(path) for path in SPECS}
CASES = [(name, label, expr) for name, spec in LOADED.items() for label, expr in _expressions(spec)]


def _draw_value(data: st.DataObject, spec: Spec, name: str) -> Any:
    if name in spec.objects:
        return data.draw(st.sampled_from(spec.objects[name].states))
    decl = spec.vars[name]
    if decl.type == "bool":
        return data.draw(st.booleans())
    lo = decl.min if decl.min is not None else -2
    hi = decl.max if decl.max is not None else lo + 6
    return data.draw(st.integers(lo, max(lo, hi)))


def _state(data: st.DataObject, spec: Spec) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Names (system scalars), closure arrays and vector arrays of one random state."""
    names: dict[str, Any] = {}
    closure: dict[str, Any] = {}
    vector: dict[str, Any] = {}
    for name in [*spec.vars, *spec.objects]:
        scope = spec.scope_of(name)
        if scope == SYSTEM:
            names[name] = _draw_value(data, spec, name)
        elif scope in (PAGE, READER):
            values = [_draw_value(data, spec, name) for _ in range(PAGES if scope == PAGE else READERS)]
            closure[name] = values
            vector[name] = np.array(values)
        elif scope == READER_PAGE:
            grid = [[_draw_value(data, spec, name) for _ in range(PAGES)] for _ in range(READERS)]
            closure[name] = {(r, p): grid[r][p] for r in range(READERS) for p in range(PAGES)}
            vector[name] = np.array(grid)
    return names, closure, vector


def _free(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Name)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                              HealthCheck.large_base_example])
@given(data=st.data())
def test_vector_backend_equals_closures(data: st.DataObject) -> None:
    states = {name: _state(data, spec) for name, spec in LOADED.items()}
    for spec_name, label, expr in CASES:
        spec = LOADED[spec_name]
        names, closure, vector = states[spec_name]
        base = {**spec.constants, **names, "pages": PAGES, "readers": READERS}
        free = _free(expr)
        axes = [(v, range(READERS) if v in "rs" else range(PAGES)) for v in ("r", "p", "s", "q") if v in free]
        if "pos" in free:
            axes.append(("pos", range(0, PAGES * spec.constants.get("C", 2) + 2)))
        for prm in next((ev.params for ev in spec.events
                         if ev.guard is expr or any(eff.value is expr for eff in ev.effects)), ()):
            axes.append((prm.name, range(prm.min, prm.max + 1)))
        bindings = list(itertools.product(*(values for _, values in axes)))
        expected = []
        fn, src = compile_expr(expr), compile_source(expr)
        for combo in bindings:
            names = {**base, **dict(zip([v for v, _ in axes], combo, strict=True))}
            expected.append(fn(names, closure))
            assert src(names, closure) == expected[-1], f"{spec_name}: {label} (source backend)"
        batch = {v: np.array([c[i] for c in bindings]) for i, (v, _) in enumerate(axes)}
        vfn = compile_vector(expr)
        got = vfn({**base, **batch}, vector)
        got_list = np.broadcast_to(np.asarray(got), (len(bindings),)).tolist() if axes else [np.asarray(got).item()]
        assert got_list == expected, f"{spec_name}: {label}"
        if axes:  # each binding's own ids given as pairs: the reductions one level deep evaluated pair-wise
            each = {"@each_pages": _every(PAGES), "@each_readers": _every(READERS)}
            paired = compile_vector(_each(expr))({**base, **batch, **each}, vector)
            assert np.broadcast_to(np.asarray(paired), (len(bindings),)).tolist() == expected, \
                f"{spec_name}: {label} (pairs)"


def _each(e: Expr) -> Expr:
    """``e`` with every reduction ranging over ``@each_<domain>`` instead of its domain."""
    e = rebuild(e, _each)
    return dataclasses.replace(e, domain=f"@each_{e.domain}") if isinstance(e, Reduce) else e


def _every(count: int) -> Any:
    """A domain of ``count`` ids that gives them to every binding as pairs."""
    def pairs(n: Any) -> tuple[int, np.ndarray, np.ndarray]:
        bindings = next(v for v in n.values() if isinstance(v, np.ndarray)).shape[0]
        return bindings, np.repeat(np.arange(bindings), count), np.tile(np.arange(count), bindings)

    return per_binding(lambda n: range(count), pairs)


def test_every_spec_contributes_cases() -> None:
    assert {name for name, _, _ in CASES} == set(LOADED)
    assert len(CASES) > 500


@pytest.mark.parametrize("domain", ["count", "list", "callable", "pairs"])
def test_domains_may_be_counts_iterables_or_callables(domain: str) -> None:
    spec = LOADED["hybrid.yaml"]
    forget = spec.event("forget").guard
    pin = np.array([0, 0, 1])
    block = np.array([["out", "in", "out"], ["out", "out", "out"]])
    arrays = {"pin": pin, "block": block, "pool": np.array(["private"] * 3),
              "tier": np.array(["gpu", "host", "offloading"])}
    held = per_binding(lambda n: [0], lambda n: (3, np.array([1]), np.array([0])))  # page 1: reader 0's
    ids: Any = {"count": 2, "list": [0, 1], "callable": lambda n: [0, 1], "pairs": held}[domain]
    got = compile_vector(forget)({"readers": ids, "pages": 3, "p": np.arange(3)}, arrays)
    assert got.tolist() == [True, False, False]
