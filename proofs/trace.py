"""Counterexample traces: read back from a Z3 model, shown as a step table, written as ITF JSON.

A trace is a list of concrete states; step i > 0 names the event (and page, params) that led to it.
Only the variables that changed are shown, and the failing conjunct of the property is named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import z3

from morphcache.spec.expr import BoolOp, Compare, Expr, Implies, Reduce, render
from morphcache.spec.interp import evaluate
from morphcache.spec.model import SCOPE_ARGS, Property, Spec

from .system import TransitionSystem
from .terms import parse_slot


@dataclass(frozen=True)
class Step:
    """One trace step: the event that fired (None for the initial state), its args, the state after."""

    index: int
    event: str | None
    args: dict[str, int]
    state: dict[str, Any]
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Trace:
    """A counterexample: the steps and the part of the property that fails at the end."""

    property_name: str
    steps: tuple[Step, ...]
    failed: tuple[str, ...]

    @property
    def length(self) -> int:
        """Number of transitions."""
        return len(self.steps) - 1


def read_state(ts: TransitionSystem, model: z3.ModelRef, s: Mapping[str, Any]) -> dict[str, Any]:
    """The concrete values of every slot of ``s`` in ``model`` (states by name)."""
    out: dict[str, Any] = {}
    for name, kind, _ in ts.slots:
        v = model.eval(s[name], model_completion=True)
        if kind == "bool":
            out[name] = z3.is_true(v)
        elif kind == "state":
            out[name] = ts.spec.objects[name.split("[", 1)[0]].states[v.as_long()]
        else:
            out[name] = v.as_long()
    return out


def read_trace(ts: TransitionSystem, model: z3.ModelRef, states: Sequence[Mapping[str, Any]], prop: Property) -> Trace:
    """Build the :class:`Trace` of an unrolling ``states`` from a satisfying ``model``."""
    steps: list[Step] = []
    prev: dict[str, Any] | None = None
    for i, s in enumerate(states):
        concrete = read_state(ts, model, s)
        event, args = None, {}
        if i > 0:
            code = model.eval(states[i - 1]["@action"], model_completion=True).as_long()
            action = ts.actions[code]
            event = action.event.name
            args = dict(action.args)
            for prm in action.event.params:
                args[prm.name] = model.eval(states[i - 1][f"@{event}.{prm.name}"], model_completion=True).as_long()
        changed = {} if prev is None else {k: (prev[k], v) for k, v in concrete.items() if prev[k] != v}
        steps.append(Step(i, event, args, concrete, changed))
        prev = concrete
    failed = failing_conjuncts(ts.spec, prop, steps)
    return Trace(prop.name, tuple(steps), failed)


def scope_of(
    spec: Spec, state: dict[str, Any], constants: dict[str, int]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a concrete state into the interpreter's ``names`` and ``arrays`` (lists by page or
    reader id; dicts by ``(r, p)``)."""
    names: dict[str, Any] = {**constants, "pages": spec.pages, "readers": spec.readers}
    arrays: dict[str, Any] = {}
    for key, value in state.items():
        base, reader, page = parse_slot(key)
        if reader is None and page is None:
            names[key] = value
        elif reader is None:
            arrays.setdefault(base, [None] * spec.pages)[page] = value
        elif page is None:
            arrays.setdefault(base, [None] * spec.readers)[reader] = value
        else:
            arrays.setdefault(base, {})[(reader, page)] = value
    return names, arrays


def failing_conjuncts(spec: Spec, prop: Property, steps: list[Step]) -> tuple[str, ...]:
    """Name the conjuncts of ``prop`` that are false at the end of the trace."""
    names, arrays = scope_of(spec, steps[-1].state, dict(spec.constants))
    if prop.kind == "step":
        ev = spec.event(str(prop.event))
        out = []
        readers: list[int | None] = list(spec.reader_range()) if ev.takes_reader else [None]
        pages: list[int | None] = list(spec.page_range()) if ev.takes_page else [None]
        dims = SCOPE_ARGS[ev.scope]
        for reader in readers:
            for page in pages:
                args = {k: v for k, v in (("r", reader), ("p", page)) if v is not None}
                env = {**names, **args}
                at = tuple(args[d] for d in dims)
                owner = names[ev.owner] if not at else arrays[ev.owner][at if len(at) > 1 else at[0]]
                if owner in ev.sources and not ev.params and evaluate(ev.guard, env, arrays):
                    call = f"{ev.name}({', '.join(f'{k}={v}' for k, v in args.items())})"
                    out += [f"{call} is enabled, but {text}" for text in _explain(prop.expr, env, arrays, "", spec)]
        return tuple(out) or (f"'{prop.event}' fires where {render(prop.expr)} is false",)
    return tuple(_explain(prop.expr, names, arrays, "", spec))


def _explain(e: Expr, names: dict[str, Any], arrays: dict[str, Any], where: str, spec: Spec) -> list[str]:
    try:
        if evaluate(e, names, arrays):
            return []
    except (KeyError, IndexError, TypeError):
        return [f"{where}{render(e)}"]
    if isinstance(e, BoolOp) and e.op == "and":
        out = [t for v in e.values for t in _explain(v, names, arrays, where, spec)]
        return out or [f"{where}{render(e)}"]
    if isinstance(e, Reduce) and e.kind == "all":
        out = []
        for q in (spec.reader_range() if e.domain == "readers" else spec.page_range()):
            out += _explain(e.body, {**names, e.var: q}, arrays, f"{where}{e.var}={q}: ", spec)
        return out or [f"{where}{render(e)}"]
    if isinstance(e, Implies):
        return _explain(e.right, names, arrays, where, spec) or [f"{where}{render(e)}"]
    if isinstance(e, Compare):
        left, right = evaluate(e.left, names, arrays), evaluate(e.right, names, arrays)
        return [f"{where}{render(e)}   ({left} {e.op} {right} is false)"]
    return [f"{where}{render(e)}"]


def format_table(trace: Trace) -> str:
    """A readable step table: step, event(args), the variables that changed."""
    rows = [("step", "event", "changed")]
    for st in trace.steps:
        if st.event is None:
            rows.append(("0", "(initial)", ""))
            continue
        args = ", ".join(f"{k}={v}" for k, v in st.args.items())
        changes = ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in st.changed.items())
        rows.append((str(st.index), f"{st.event}({args})", changes))
    width0 = max(len(r[0]) for r in rows)
    width1 = max(len(r[1]) for r in rows)
    lines = [f"  {r[0]:>{width0}}  {r[1]:<{width1}}  {r[2]}".rstrip() for r in rows]
    lines.append(f"  violated: {trace.failed[0] if trace.failed else trace.property_name}")
    lines += [f"            {f}" for f in trace.failed[1:]]
    return "\n".join(lines)


def _itf_value(v: Any) -> Any:
    if isinstance(v, bool) or isinstance(v, str):
        return v
    return {"#bigint": str(v)}


def _itf_key(key: Any) -> Any:
    if isinstance(key, tuple):
        return {"#tup": [_itf_value(k) for k in key]}
    return _itf_value(key)


def to_itf(spec: Spec, trace: Trace) -> dict[str, Any]:
    """The trace in the ITF format (Apalache/Quint): per-page slots become ``#map`` values."""
    variables: list[str] = []
    states = []
    for st in trace.steps:
        names, arrays = scope_of(spec, st.state, {})
        entry: dict[str, Any] = {"#meta": {"index": st.index}}
        for k, v in sorted(names.items()):
            if k in ("pages", "readers"):
                continue
            entry[k] = _itf_value(v)
        for k, values in sorted(arrays.items()):
            items = values.items() if isinstance(values, dict) else enumerate(values)
            entry[k] = {"#map": [[_itf_key(i), _itf_value(x)] for i, x in items]}
        entry["action"] = st.event or "init"
        entry["action_args"] = {"#map": [[k, _itf_value(v)] for k, v in st.args.items()]}
        if not variables:
            variables = [k for k in entry if k != "#meta"]
        states.append(entry)
    return {
        "#meta": {"format": "ITF", "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
                  "source": spec.path, "description": f"counterexample to '{trace.property_name}'",
                  "violated": list(trace.failed)},
        "vars": variables,
        "states": states,
    }


def write_itf(spec: Spec, traces: list[Trace], path: str | Path) -> None:
    """Write one ITF file (one trace) or, for several traces, ``path`` with ``-NAME`` suffixes."""
    p = Path(path)
    if len(traces) == 1:
        p.write_text(json.dumps(to_itf(spec, traces[0]), indent=1) + "\n")
        return
    stem, suffix = (p.name[:-len(".itf.json")], ".itf.json") if p.name.endswith(".itf.json") \
        else (p.stem, p.suffix or ".itf.json")
    for tr in traces:
        target = p.with_name(f"{stem}-{tr.property_name}{suffix}")
        target.write_text(json.dumps(to_itf(spec, tr), indent=1) + "\n")
