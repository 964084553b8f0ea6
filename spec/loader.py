"""Read a spec file into a checked :class:`~morphcache.spec.model.Spec`.

Sections (see ``spec/README.md``): ``spec``, ``description``, ``instance`` (pages, readers,
constants), ``system``, ``reader``, ``page`` and ``reader_page`` variables, ``objects``,
``predicates``, ``lemmas``, ``properties``, ``lookup`` and ``layouts``.  Every problem raises one
located :class:`SpecError`, in the file of the ``extends:`` chain where the offending value is
written.  Sizes are bounded by :class:`~morphcache.limits.Limits`, checked before the work they bound.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from morphcache.limits import DEFAULT, Limits

from .errors import SpecError
from .expr import Const, Expr, IfExp, Index, Loc, Name, Reduce, children, walk
from .interp import evaluate
from .model import (
    PAGE,
    PATHS,
    READER,
    READER_PAGE,
    RULES,
    SCOPE_ARGS,
    SCOPES,
    SYSTEM,
    Effect,
    Event,
    Layout,
    Lookup,
    ObjectSpec,
    Param,
    Property,
    Spec,
    VarDecl,
)
from .parse import Predicate, Source, parse_expr
from .typecheck import Scope, check
from .yamlpos import YList, YMap, load_yaml, merge

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "uint8": 1, "int8": 1}
LAYOUT_BITS = 64  # layouts are proved with bit-vectors of this width
_KIND_NAMES = {"YMap": "a mapping", "YList": "a list", "int": "an integer", "str": "a string",
               "bool": "true or false"}
_TOP = ("spec", "description", "refutes", "instance", "system", "reader", "page", "reader_page", "objects",
        "predicates", "lemmas", "properties", "lookup", "layouts")
_RESERVED = ("p", "q", "r", "s", "pos", "pages", "readers")


def load_spec(path: str | Path, pages: int | None = None, limits: Limits | None = None) -> Spec:
    """Load, parse and type-check the spec at ``path``; ``pages`` overrides the checked instance size."""
    limits = limits or DEFAULT
    doc = load_document(Path(path), limits=limits)
    if pages is not None:
        instance = doc.get("instance")
        if isinstance(instance, YMap):
            instance["pages"] = pages
            instance.marks.setdefault("pages", (instance.line, instance.col))
    return _Loader(str(path), doc, limits).spec()


def read_text(path: Path, limits: Limits = DEFAULT) -> str:
    """The UTF-8 text of the spec file at ``path``, at most ``spec_bytes`` long."""
    p = str(path)
    try:
        with path.open("rb") as f:
            data = f.read(limits.spec_bytes + 1)
    except OSError as exc:
        raise SpecError(p, 1, 1, f"cannot read spec: {exc.strerror or exc}") from None
    if len(data) > limits.spec_bytes:
        raise SpecError(p, 1, 1, limits.exceeded("spec_bytes", f"the file is over {limits.spec_bytes} bytes"))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError(p, line, col, f"not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def load_document(path: Path, seen: tuple[Path, ...] = (), limits: Limits = DEFAULT) -> YMap:
    """Read one spec document, resolving ``extends: OTHER.yaml`` (relative to this file) by merging."""
    p = str(path)
    doc = load_yaml(read_text(path, limits), p, limits)
    if "extends" not in doc:
        return doc
    line, col = doc.marks["extends"]
    parent = doc["extends"]
    if not isinstance(parent, str) or not parent:
        raise SpecError(p, line, col, "extends: expected the path of a spec file")
    shown = path.parent / parent  # as the user would write it; resolved only to find cycles
    try:
        target = shown.resolve()
        here = path.resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise SpecError(p, line, col, f"extends: cannot resolve '{parent}': {exc}") from None
    if target in seen or target == here:
        raise SpecError(p, line, col, f"extends: '{parent}' makes a cycle")
    if not target.is_file():
        raise SpecError(p, line, col, f"extends: no spec file at '{parent}'")
    if len(seen) + 1 >= limits.extends_depth:
        raise SpecError(p, line, col, limits.exceeded(
            "extends_depth", f"extends: the chain is longer than {limits.extends_depth} files"))
    patch = YMap({k: v for k, v in doc.items() if k != "extends"})
    patch.file, patch.line, patch.col = doc.file, doc.line, doc.col
    patch.marks = {k: v for k, v in doc.marks.items() if k != "extends"}
    return merge(load_document(shown, (*seen, here), limits), patch)


class _Loader:
    def __init__(self, path: str, doc: YMap, limits: Limits = DEFAULT) -> None:
        self.path = path
        self.doc = doc
        self.limits = limits
        self.constants: dict[str, int] = {}
        self.vars: dict[str, VarDecl] = {}
        self.states: dict[str, tuple[str, ...]] = {}
        self.scopes: dict[str, str] = {}
        self.predicates: dict[str, Predicate] = {}
        self.done: list[ObjectSpec] = []  # objects whose events are loaded (event names are unique)
        self.pages = 0
        self.readers = 1

    # -- helpers -----------------------------------------------------------------------------
    def err(self, where: YMap | YList, key: str | int | None, message: str) -> SpecError:
        if key is None:
            return SpecError(where.file or self.path, where.line, where.col, message)
        file, line, col = where.where(str(key)) if isinstance(where, YMap) else where.where(int(key))
        return SpecError(file or self.path, line, col, message)

    def need(self, m: YMap, key: str, kind: type | tuple[type, ...], what: str) -> Any:
        if key not in m:
            raise self.err(m, None, f"{what}: missing '{key}'")
        value = m[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in kinds):
            shown = " or ".join(_KIND_NAMES.get(k.__name__, k.__name__) for k in kinds)
            raise self.err(m, key, f"{what}: '{key}' must be {shown}")
        return value

    def mapping(self, m: YMap, key: str, what: str, required: bool = True) -> YMap:
        if key not in m and not required:
            empty = YMap()
            empty.file, empty.line, empty.col = m.file, m.line, m.col
            return empty
        return self.need(m, key, YMap, what)  # type: ignore[no-any-return]

    def expr(self, m: YMap | YList, key: str | int, scope: Scope, want: str | None = "bool") -> Expr:
        if isinstance(m, YMap) and key not in m:
            raise self.err(m, None, f"missing '{key}'")
        file, line, col = m.where(key) if isinstance(m, YMap) else m.where(int(key))  # type: ignore[arg-type]
        file = file or self.path
        value = m[key]  # type: ignore[index]
        if isinstance(value, (YMap, YList, float)) or value is None:
            raise SpecError(file, line, col, "expected an expression")
        e = parse_expr(value, Source(file, line, col), self.predicates, self.limits)
        check(e, Scope(file, scope.scalars, scope.arrays, scope.states, scope.dims), want)
        return e

    def const_int(self, m: YMap | YList, key: str | int, what: str) -> int:
        """The value of a constant expression (constants and ``pages`` only), within ``int_abs``."""
        value = self.expr(m, key, self.const_scope(), "int")
        try:
            result = evaluate(value, self.const_names())
        except ZeroDivisionError:
            raise self.err(m, key, f"{what}: division by zero") from None
        assert isinstance(result, int)
        if abs(result) > self.limits.int_abs:
            raise self.err(m, key, self.limits.exceeded("int_abs", f"{what}: the value {result} is too large"))
        return result

    def const_names(self) -> dict[str, int]:
        return {**self.constants, "pages": self.pages, "readers": self.readers}

    def const_scope(self) -> Scope:
        return Scope(self.path, {k: "int" for k in [*self.constants, "pages", "readers"]}, {}, {})

    def base_scope(self) -> Scope:
        scalars = {k: "int" for k in [*self.constants, "pages", "readers"]}
        arrays: dict[str, str] = {}
        dims: dict[str, str] = {}
        typed = [(name, decl.scope, decl.type) for name, decl in self.vars.items()]
        typed += [(obj, scope, f"state:{obj}") for obj, scope in self.scopes.items()]
        for name, scope, vtype in typed:
            if scope == SYSTEM:
                scalars[name] = vtype
            else:
                arrays[name] = vtype
                dims[name] = scope
        return Scope(self.path, scalars, arrays, self.states, dims)

    def unknown_keys(self, m: YMap, allowed: tuple[str, ...], what: str) -> None:
        for key in m:
            if key not in allowed:
                raise self.err(m, key, f"{what}: unknown key '{key}' (allowed: {', '.join(allowed)})")

    def name_ok(self, m: YMap, key: str, what: str) -> None:
        if not key.isidentifier() or key in _RESERVED:
            raise self.err(m, key, f"{what} name '{key}' is not a usable identifier")
        taken = [*self.constants, *self.vars, *self.states]
        if key in taken:
            raise self.err(m, key, f"{what} '{key}' is declared twice")

    # -- sections ----------------------------------------------------------------------------
    def spec(self) -> Spec:
        d = self.doc
        self.unknown_keys(d, _TOP, "spec")
        name = self.need(d, "spec", str, "spec")
        inst = self.mapping(d, "instance", "instance")
        self.unknown_keys(inst, ("pages", "readers", "constants"), "instance")
        self.pages = self.need(inst, "pages", int, "instance")
        if self.pages < 1:
            raise self.err(inst, "pages", "instance: pages must be at least 1")
        if self.pages > self.limits.pages:
            raise self.err(inst, "pages", self.limits.exceeded("pages", f"instance: {self.pages} pages"))
        if "readers" in inst:
            readers = inst["readers"]
            if isinstance(readers, bool) or not isinstance(readers, int) or readers < 1:
                raise self.err(inst, "readers", "instance: readers must be an int, at least 1")
            if readers > self.limits.readers:
                raise self.err(inst, "readers", self.limits.exceeded("readers", f"instance: {readers} readers"))
            self.readers = readers
        consts = self.mapping(inst, "constants", "instance", required=False)
        for key in consts:
            self.name_ok(consts, key, "constant")
            self.constants[key] = self.const_int(consts, key, "constant")
        for scope in SCOPES:
            decls = self.mapping(d, scope, scope, required=False)
            for key in decls:
                self.var(decls, key, scope, None)
        objects_raw = self.mapping(d, "objects", "objects")
        if not objects_raw:
            raise self.err(objects_raw, None, "objects: declare at least one object")
        for key in objects_raw:  # first pass: names, states and variables
            self.object_header(objects_raw, key)
        self.predicate_section()
        objects = {key: self.object_events(objects_raw, key) for key in objects_raw}
        props = self.lemmas() + self.properties(objects)
        return Spec(
            name=name,
            path=self.path,
            description=str(d.get("description", "")).strip(),
            pages=self.pages,
            constants=dict(self.constants),
            vars=dict(self.vars),
            objects=objects,
            properties=props,
            lookup=self.lookup(),
            layouts=self.layouts(),
            refutes=self.refutes(),
            readers=self.readers,
        )

    def refutes(self) -> tuple[str, ...]:
        """The property names a known-bad design is meant to refute."""
        if "refutes" not in self.doc:
            return ()
        names = self.need(self.doc, "refutes", YList, "spec")
        for i, name in enumerate(names):
            if not isinstance(name, str):
                raise self.err(names, i, "refutes: expected property names")
        return tuple(names)

    def var(self, decls: YMap, key: str, scope: str, owner: str | None) -> None:
        self.name_ok(decls, key, "variable")
        m = decls[key]
        if not isinstance(m, YMap):
            raise self.err(decls, key, f"variable '{key}': expected a mapping with type and init")
        self.unknown_keys(m, ("type", "min", "max", "init", "ghost", "description"), f"variable '{key}'")
        vtype = self.need(m, "type", str, f"variable '{key}'")
        if vtype not in ("int", "bool"):
            raise self.err(m, "type", f"variable '{key}': type must be int or bool, not '{vtype}'")
        lo = self.const_int(m, "min", key) if "min" in m else None
        hi = self.const_int(m, "max", key) if "max" in m else None
        lo_expr = self.expr(m, "min", self.const_scope(), "int") if "min" in m else None
        hi_expr = self.expr(m, "max", self.const_scope(), "int") if "max" in m else None
        if vtype == "bool" and (lo is not None or hi is not None):
            raise self.err(m, None, f"variable '{key}': a bool has no min or max")
        if "init" not in m:
            raise self.err(m, None, f"variable '{key}': missing 'init'")
        init: int | bool
        if vtype == "bool":
            init = self.need(m, "init", bool, f"variable '{key}'")
        else:
            init = self.const_int(m, "init", key)
            if (lo is not None and init < lo) or (hi is not None and init > hi):
                raise self.err(m, "init", f"variable '{key}': init {init} is outside [{lo}, {hi}]")
        if lo is not None and hi is not None and lo > hi:
            raise self.err(m, None, f"variable '{key}': min {lo} is above max {hi}")
        ghost = m.get("ghost", False)
        if not isinstance(ghost, bool):
            raise self.err(m, "ghost", f"variable '{key}': ghost must be true or false")
        self.vars[key] = VarDecl(key, vtype, scope, init, lo, hi, owner, Loc(decls.marks[key][0], decls.marks[key][1]),
                                 lo_expr, hi_expr, ghost)

    def object_header(self, objs: YMap, key: str) -> None:
        self.name_ok(objs, key, "object")
        m = objs[key]
        if not isinstance(m, YMap):
            raise self.err(objs, key, f"object '{key}': expected a mapping")
        self.unknown_keys(m, ("scope", "description", "states", "initial", "vars", "events"), f"object '{key}'")
        scope = m.get("scope", PAGE)
        if scope not in SCOPES:
            raise self.err(m, "scope", f"object '{key}': scope must be one of {', '.join(SCOPES)}")
        states = self.need(m, "states", YList, f"object '{key}'")
        if not states or not all(isinstance(s, str) and s.isidentifier() for s in states):
            raise self.err(m, "states", f"object '{key}': states must be a non-empty list of names")
        if len(set(states)) != len(states):
            raise self.err(m, "states", f"object '{key}': a state is listed twice")
        self.states[key] = tuple(states)
        self.scopes[key] = scope
        initial = self.need(m, "initial", str, f"object '{key}'")
        if initial not in states:
            raise self.err(m, "initial", f"object '{key}': initial state '{initial}' is not one of its states")
        for vname in self.mapping(m, "vars", f"object '{key}'", required=False):
            self.var(m["vars"], vname, scope, key)

    def predicate_section(self) -> None:
        preds = self.mapping(self.doc, "predicates", "predicates", required=False)
        for key in preds:
            self.name_ok(preds, key, "predicate")
            m = preds[key]
            if isinstance(m, YMap):
                self.unknown_keys(m, ("params", "expr", "description"), f"predicate '{key}'")
                params = tuple(self.need(m, "params", YList, f"predicate '{key}'")) if "params" in m else ()
                if not all(isinstance(prm, str) and prm.isidentifier() for prm in params):
                    raise self.err(m, "params", f"predicate '{key}': params must be a list of names")
                body_map, body_key = m, "expr"
                if "expr" not in m:
                    raise self.err(m, None, f"predicate '{key}': missing 'expr'")
            else:
                params, body_map, body_key = ("p",), preds, key
            scope = self.base_scope().bind(**{prm: "reader" if prm in ("r", "s") else "int" for prm in params})
            body = self.expr(body_map, body_key, scope)
            self.predicates[key] = Predicate(key, params, body)

    def object_events(self, objs: YMap, key: str) -> ObjectSpec:
        m = objs[key]
        scope = self.scopes[key]
        events: list[Event] = []
        raw = self.mapping(m, "events", f"object '{key}'", required=False)
        for ename in raw:
            if not ename.isidentifier():
                raise self.err(raw, ename, f"event name '{ename}' is not an identifier")
            if any(ename in [e.name for e in o.events] for o in self.done):
                raise self.err(raw, ename, f"event '{ename}' is declared twice")
            events.append(self.event(raw, ename, key, scope))
        obj = ObjectSpec(key, scope, self.states[key], m["initial"],
                         tuple(v for v, d in self.vars.items() if d.owner == key), tuple(events),
                         str(m.get("description", "")).strip())
        self.done.append(obj)
        return obj

    def event(self, raw: YMap, ename: str, owner: str, scope: str) -> Event:
        m = raw[ename]
        what = f"event '{ename}'"
        if not isinstance(m, YMap):
            raise self.err(raw, ename, f"{what}: expected a mapping with from and to")
        self.unknown_keys(m, ("from", "to", "params", "guard", "effects", "env", "observes", "description"), what)
        sources = m.get("from")
        sources = [sources] if isinstance(sources, str) else sources
        if not isinstance(sources, list) or not sources:
            raise self.err(m, "from" if "from" in m else None, f"{what}: 'from' must name one or more states")
        for i, s in enumerate(sources):
            if s not in self.states[owner]:
                where: YMap | YList = m if not isinstance(m["from"], YList) else m["from"]
                raise self.err(where, "from" if where is m else i,
                               f"{what}: '{s}' is not a state of '{owner}'")
        target = self.need(m, "to", str, what)
        if target not in self.states[owner]:
            raise self.err(m, "to", f"{what}: '{target}' is not a state of '{owner}'")
        params: list[Param] = []
        for pname, pm in self.mapping(m, "params", what, required=False).items():
            if not isinstance(pm, YMap) or "min" not in pm or "max" not in pm:
                raise self.err(m["params"], pname, f"{what}: param '{pname}' needs min and max")
            if pname in _RESERVED or not pname.isidentifier():
                raise self.err(m["params"], pname, f"{what}: param name '{pname}' is not a usable identifier")
            params.append(Param(pname, self.const_int(pm, "min", pname), self.const_int(pm, "max", pname),
                                self.expr(pm, "min", self.const_scope(), "int"),
                                self.expr(pm, "max", self.const_scope(), "int")))
        env = m.get("env", False)
        if not isinstance(env, bool):
            raise self.err(m, "env", f"{what}: env must be true or false")
        observes = self.observes(m, what)
        escope = self.base_scope().bind(p="int", r="reader", **{prm.name: "int" for prm in params})
        guard = self.expr(m, "guard", escope) if "guard" in m else parse_expr("true", Source(self.path, 0, 0))
        effects = tuple(self.effect(m["effects"], k, escope, what)
                        for k in self.mapping(m, "effects", what, required=False))
        used = _free(guard) | {n for eff in effects for n in (*_free(eff.value), *(eff.index or "").split(","))}
        args = tuple(a for a in ("r", "p") if a in SCOPE_ARGS[scope] or a in used)
        if not env:
            self.no_ghost_reads(guard, f"{what}: its guard", ())
            for eff in effects:
                if not self.vars.get(eff.target, None) or not self.vars[eff.target].ghost:
                    self.no_ghost_reads(eff.value, f"{what}: its effect on '{eff.target}'", observes)
        loc = Loc(raw.marks[ename][0], raw.marks[ename][1])
        return Event(ename, owner, scope, tuple(sources), target, guard, effects, tuple(params),
                     str(m.get("description", "")).strip(), loc, args, env, observes)

    def observes(self, m: YMap, what: str) -> tuple[str, ...]:
        if "observes" not in m:
            return ()
        raw = m["observes"]
        names = [raw] if isinstance(raw, str) else raw
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise self.err(m, "observes", f"{what}: observes must list ghost variables")
        for i, n in enumerate(names):
            if n not in self.vars or not self.vars[n].ghost:
                where: YMap | YList = raw if isinstance(raw, YList) else m
                raise self.err(where, i if where is raw else "observes",
                               f"{what}: observes '{n}', which is not a ghost")
        return tuple(names)

    def no_ghost_reads(self, e: Expr, what: str, allowed: tuple[str, ...]) -> None:
        """Raise at the first ghost variable ``e`` reads (other than ``allowed``): the design may not read the truth."""
        for node in walk(e):
            if isinstance(node, (Name, Index)) and node.name in self.vars and self.vars[node.name].ghost \
                    and node.name not in allowed:
                raise SpecError(node.loc.file or self.path, node.loc.line, node.loc.col,
                                f"{what} reads ghost '{node.name}': the design may only read its own state "
                                "(ghosts are for properties, environment events and declared observations)")

    def effect(self, effs: YMap, key: str, escope: Scope, what: str) -> Effect:
        name, index = key, None
        if key.endswith("]") and "[" in key:
            name, raw_index = key[:-1].split("[", 1)
            index = ",".join(part.strip() for part in raw_index.split(","))
        if name in self.states:
            target_type, target_scope = f"state:{name}", self.scopes[name]
        elif name in self.vars:
            target_type, target_scope = self.vars[name].type, self.vars[name].scope
        else:
            raise self.err(effs, key, f"{what}: effect on unknown variable '{name}'")
        forms = _EFFECT_FORMS[target_scope]
        if index not in forms:
            shown = " or ".join(f"{name}[{f}]" if f else name for f in forms)
            raise self.err(effs, key, f"{what}: {target_scope.replace('_', ' and ')} '{name}' must be written {shown}")
        scope = escope
        if index is not None:
            parts = index.split(",")
            if target_scope == READER_PAGE:
                scope = scope.bind(**({"s": "reader"} if parts[0] == "*" else {}),
                                   **({"q": "int"} if parts[1] == "*" else {}))
            elif parts[0] == "*":
                scope = scope.bind(**({"s": "reader"} if target_scope == READER else {"q": "int"}))
        value = self.expr(effs, key, scope, None)
        got = check(value, scope)
        if got != target_type and not (got == "str" and target_type.startswith("state:")):
            raise self.err(effs, key, f"{what}: '{name}' is {target_type}, the effect gives {got}")
        if got == "str":
            for literal in _state_literals(value):
                if literal not in self.states[name]:
                    raise self.err(effs, key, f"{what}: '{literal}' is not a state of '{name}'")
        mark = effs.marks[key]
        return Effect(name, index, value, Loc(mark[0], mark[1]))

    def lemmas(self) -> tuple[Property, ...]:
        raw = self.mapping(self.doc, "lemmas", "lemmas", required=False)
        out = []
        for key in raw:
            if isinstance(raw[key], YMap):
                self.unknown_keys(raw[key], ("expr", "description"), f"lemma '{key}'")
                if "expr" not in raw[key]:
                    raise self.err(raw[key], None, f"lemma '{key}': missing 'expr'")
            m, k, desc = (raw[key], "expr", raw[key].get("description", "")) if isinstance(raw[key], YMap) \
                else (raw, key, "")
            e = self.expr(m, k, self.base_scope())
            out.append(Property(key, "lemma", e, None, None, str(desc).strip(),
                                Loc(raw.marks[key][0], raw.marks[key][1])))
        return tuple(out)

    def properties(self, objects: dict[str, ObjectSpec]) -> tuple[Property, ...]:
        raw = self.mapping(self.doc, "properties", "properties", required=False)
        events = {ev.name: ev for o in objects.values() for ev in o.events}
        out = []
        for key in raw:
            m = raw[key]
            what = f"property '{key}'"
            if not isinstance(m, YMap):
                raise self.err(raw, key, f"{what}: expected a mapping with expr")
            self.unknown_keys(m, ("expr", "rule", "kind", "event", "description"), what)
            kind = m.get("kind", "invariant")
            if kind not in ("invariant", "step"):
                raise self.err(m, "kind", f"{what}: kind must be invariant or step")
            rule = m.get("rule")
            if rule is not None and rule not in RULES:
                raise self.err(m, "rule", f"{what}: rule must be one of {', '.join(RULES)}")
            scope = self.base_scope()
            event = None
            if kind == "step":
                event = self.need(m, "event", str, what)
                if event not in events:
                    raise self.err(m, "event", f"{what}: unknown event '{event}'")
                ev = events[event]
                scope = scope.bind(**{a: "reader" if a == "r" else "int" for a in ev.arg_names})
            e = self.expr(m, "expr", scope)
            out.append(Property(key, kind, e, rule, event, str(m.get("description", "")).strip(),
                                Loc(raw.marks[key][0], raw.marks[key][1])))
        return tuple(out)

    def lookup(self) -> Lookup:
        m = self.mapping(self.doc, "lookup", "lookup", required=False)
        self.unknown_keys(m, ("needed", "ready", "recovery"), "lookup")
        page_scope = self.base_scope().bind(p="int")
        needed_raw = self.mapping(m, "needed", "lookup", required=False)
        needed = {k: self.expr(needed_raw, k, page_scope.bind(pos="int")) for k in needed_raw}
        ready_raw = self.mapping(m, "ready", "lookup", required=False)
        ready = {k: self.expr(ready_raw, k, page_scope) for k in ready_raw}
        recovery: dict[str, dict[str, Expr]] = {}
        rec_raw = self.mapping(m, "recovery", "lookup", required=False)
        for obj in rec_raw:
            paths = self.mapping(rec_raw, obj, f"recovery of '{obj}'")
            for path in paths:
                if path not in PATHS:
                    raise self.err(paths, path, f"recovery of '{obj}': unknown path '{path}' "
                                   f"(paths: {', '.join(PATHS)})")
            recovery[obj] = {path: self.expr(paths, path, page_scope) for path in paths}
        for table, raw in (("needed", needed_raw), ("ready", ready_raw), ("recovery", rec_raw)):
            for k in raw:
                if k not in self.states:
                    raise self.err(raw, k, f"lookup {table}: '{k}' is not an object")
        for k in needed:
            if k not in ready:
                raise self.err(needed_raw, k, f"lookup: '{k}' is needed but has no ready predicate")
        for k, e in [*needed.items(), *ready.items()]:
            self.no_ghost_reads(e, f"lookup of '{k}'", ())
        for k, conds in recovery.items():
            for path, cond in conds.items():
                self.no_ghost_reads(cond, f"lookup recovery '{path}' of '{k}'", ())
        return Lookup(tuple(needed), needed, ready, recovery)

    def layouts(self) -> tuple[Layout, ...]:
        raw = self.mapping(self.doc, "layouts", "layouts", required=False)
        out = []
        for key in raw:
            m = raw[key]
            what = f"layout '{key}'"
            if not isinstance(m, YMap):
                raise self.err(raw, key, f"{what}: expected a mapping")
            self.unknown_keys(m, ("dtype", "shape", "entries", "stride_bytes", "base", "align", "pool_bytes",
                                  "description"), what)
            dtype = self.need(m, "dtype", str, what)
            if dtype not in DTYPE_BYTES:
                raise self.err(m, "dtype", f"{what}: unknown dtype '{dtype}' ({', '.join(DTYPE_BYTES)})")
            shape_raw = self.need(m, "shape", YList, what)
            shape = tuple(self.const_int(shape_raw, i, what) for i in range(len(shape_raw)))
            if any(s <= 0 for s in shape):
                raise self.err(m, "shape", f"{what}: every dimension must be positive, got {list(shape)}")
            entry_bytes = math.prod(shape) * DTYPE_BYTES[dtype]
            entries = self.const_int(m, "entries", what)
            stride = self.const_int(m, "stride_bytes", what) if "stride_bytes" in m else entry_bytes
            base = self.const_int(m, "base", what) if "base" in m else 0
            align = self.const_int(m, "align", what) if "align" in m else 1
            if align <= 0 or align & (align - 1):
                raise self.err(m, "align", f"{what}: align must be a positive power of two, got {align}")
            pool = self.const_int(m, "pool_bytes", what) if "pool_bytes" in m else base + entries * stride
            for field, value in (("entries", entries), ("stride_bytes", stride), ("base", base),
                                 ("pool_bytes", pool), ("align", align)):
                if not 0 <= value < 2**LAYOUT_BITS:
                    raise self.err(m, field if field in m else "entries",
                                   f"{what}: {field} is {value}, outside the {LAYOUT_BITS}-bit address range")
            out.append(Layout(key, dtype, shape, entries, entry_bytes, stride, base, align, pool,
                              Loc(raw.marks[key][0], raw.marks[key][1])))
        return tuple(out)


_EFFECT_FORMS: dict[str, tuple[str | None, ...]] = {
    SYSTEM: (None,), PAGE: ("p", "*"), READER: ("r", "*"), READER_PAGE: ("r,p", "r,*", "*,p", "*,*"),
}


def _free(e: Expr, bound: frozenset[str] = frozenset()) -> set[str]:
    """The names ``e`` reads that no reduction inside it binds."""
    if isinstance(e, Name):
        return set() if e.name in bound else {e.name}
    if isinstance(e, Reduce):
        return _free(e.body, bound | {e.var})
    out: set[str] = set()
    for child in children(e):
        out |= _free(child, bound)
    return out


def _state_literals(e: Expr) -> list[str]:
    """The quoted state names an effect value can produce (through ``a if c else b``)."""
    if isinstance(e, IfExp):
        return _state_literals(e.then) + _state_literals(e.other)
    return [e.value] if isinstance(e, Const) and isinstance(e.value, str) else []
