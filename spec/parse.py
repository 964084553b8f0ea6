"""Parse the restricted expression syntax into the IR, with ``ast`` (never ``eval``).

Allowed: int/bool literals, quoted state names, names, ``name[index]`` and ``name[r, p]``,
``not``/``and``/``or``, comparisons (chains allowed), ``in``/``not in`` a literal set,
``+ - * // %``, unary minus, ``a if c else b``, ``implies(a, b)``, ``all/any/sum(body for q in
pages)`` and ``(... for s in readers)``, and calls of the spec's named predicates, which are
inlined.  Anything else is a :class:`SpecError` at its column.

Size is bounded before anything recurses over the tree: the text's length (``expr_chars``), then the
syntax tree's nesting (``expr_depth``) and node count (``expr_nodes``), counted again with the
predicates inlined (a predicate calling another twice doubles; the count stops at the limit).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from morphcache.limits import DEFAULT, Limits

from .errors import SpecError
from .expr import (
    PAGES,
    READERS,
    Binary,
    BoolOp,
    Compare,
    Const,
    Expr,
    IfExp,
    Implies,
    Index,
    InSet,
    Loc,
    Name,
    Reduce,
    Unary,
    children,
    substitute,
)

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


@dataclass(frozen=True)
class Predicate:
    """A named, parameterised predicate (a macro): inlined wherever it is called."""

    name: str
    params: tuple[str, ...]
    body: Expr


@dataclass(frozen=True)
class Source:
    """Where an expression string sits in its file, to turn ast offsets into file positions."""

    path: str
    line: int
    col: int


def parse_expr(text: str, src: Source, predicates: Mapping[str, Predicate] | None = None,
               limits: Limits = DEFAULT) -> Expr:
    """Parse ``text`` into the IR; raise :class:`SpecError` located in the spec file."""
    if not isinstance(text, (str, int, bool)):
        raise SpecError(src.path, src.line, src.col, f"expected an expression, got {type(text).__name__}")
    text = str(text)
    if len(text) > limits.expr_chars:
        raise SpecError(src.path, src.line, src.col,
                        limits.exceeded("expr_chars", f"the expression is {len(text)} characters long"))
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        col = (exc.offset or 1) - 1
        raise SpecError(src.path, src.line, src.col + col, f"cannot parse expression: {exc.msg}") from None
    except (RecursionError, MemoryError):  # Python's parser gives up on very deep nesting
        raise SpecError(src.path, src.line, src.col, "the expression nests too deeply for Python's parser "
                        f"(the limit expr_depth={limits.expr_depth} is far below)") from None
    builder = _Builder(src, predicates or {}, limits)
    builder.measure(tree.body)
    e = builder.build(tree.body)
    if _size_within(e, limits.expr_nodes) > limits.expr_nodes:  # arguments repeated by inlining count too
        raise SpecError(src.path, src.line, src.col, limits.exceeded(
            "expr_nodes", f"the expression has more than {limits.expr_nodes} nodes with its predicates inlined"))
    depth = _depth(e)
    if depth > limits.expr_depth:
        raise SpecError(src.path, src.line, src.col, limits.exceeded(
            "expr_depth", f"the expression nests {depth} levels deep with its predicates inlined"))
    return e


def _depth(e: Expr) -> int:
    """Nesting depth of ``e`` (a leaf is 1), without recursion."""
    deepest, stack = 0, [(e, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in children(node))
    return deepest


def _size_within(e: Expr, budget: int) -> int:
    """Nodes of ``e``, counting stopped once past ``budget`` (the result is then ``budget + 1``)."""
    count, stack = 0, [e]
    while stack and count <= budget:
        node = stack.pop()
        count += 1
        stack.extend(children(node))
    return count


class _Builder:
    def __init__(self, src: Source, predicates: Mapping[str, Predicate], limits: Limits) -> None:
        self.src = src
        self.predicates = predicates
        self.limits = limits
        self.nodes = 0  # IR nodes built so far, inlined predicates included
        self.depths: dict[int, int] = {}  # id(ast node) -> its depth, from measure()

    def measure(self, root: ast.expr) -> None:
        """Refuse a syntax tree deeper than ``expr_depth`` or larger than ``expr_nodes`` (no recursion)."""
        count, stack = 0, [(root, 1)]
        while stack:
            node, depth = stack.pop()
            count += 1
            self.depths[id(node)] = depth
            if depth > self.limits.expr_depth:
                raise self.fail(node, self.limits.exceeded(
                    "expr_depth", f"the expression nests more than {self.limits.expr_depth} levels deep"))
            if count > self.limits.expr_nodes:
                raise self.fail(root, self.limits.exceeded(
                    "expr_nodes", f"the expression has more than {self.limits.expr_nodes} nodes"))
            stack.extend((c, depth + 1) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr))

    def grow(self, node: ast.AST, nodes: int) -> None:
        """Count ``nodes`` more IR nodes; refuse once past ``expr_nodes``."""
        self.nodes += nodes
        if self.nodes > self.limits.expr_nodes:
            raise self.fail(node, self.limits.exceeded(
                "expr_nodes", f"the expression has more than {self.limits.expr_nodes} nodes with its "
                              "predicates inlined"))

    def loc(self, node: ast.AST) -> Loc:
        return Loc(self.src.line + getattr(node, "lineno", 1) - 1, self.src.col + getattr(node, "col_offset", 0),
                   self.src.path)

    def fail(self, node: ast.AST, message: str) -> SpecError:
        loc = self.loc(node)
        return SpecError(self.src.path, loc.line, loc.col, message)

    def build(self, node: ast.expr) -> Expr:  # noqa: C901 - one case per syntax form
        loc = self.loc(node)
        self.grow(node, 1)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, int) and not isinstance(node.value, bool) and abs(node.value) > \
                    self.limits.int_abs:
                raise self.fail(node, self.limits.exceeded("int_abs", f"integer {node.value} is too large"))
            if isinstance(node.value, (bool, int, str)):
                return Const(node.value, loc)
            raise self.fail(node, f"literal {node.value!r} is not allowed (ints, booleans, quoted states)")
        if isinstance(node, ast.Name):
            if node.id in ("true", "false"):
                return Const(node.id == "true", loc)
            return Name(node.id, loc)
        if isinstance(node, ast.Subscript):
            if not isinstance(node.value, ast.Name):
                raise self.fail(node, "only a name can be indexed, as in gen[p] or lgen[r, p]")
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if not parts:
                raise self.fail(node, "an index needs at least one subscript")
            return Index(node.value.id, tuple(self.build(a) for a in parts), loc)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return Unary("not", self.build(node.operand), loc)
            if isinstance(node.op, ast.USub):
                return Unary("-", self.build(node.operand), loc)
            raise self.fail(node, "only 'not' and unary '-' are allowed")
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise self.fail(node, "only + - * // % are allowed")
            return Binary(op, self.build(node.left), self.build(node.right), loc)
        if isinstance(node, ast.BoolOp):
            word = "and" if isinstance(node.op, ast.And) else "or"
            return BoolOp(word, tuple(self.build(v) for v in node.values), loc)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.IfExp):
            return IfExp(self.build(node.test), self.build(node.body), self.build(node.orelse), loc)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.fail(node, f"{type(node).__name__} is not allowed in a spec expression")

    def compare(self, node: ast.Compare) -> Expr:
        parts: list[Expr] = []
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right, (ast.Set, ast.List, ast.Tuple)):
                    raise self.fail(right, "'in' needs a literal set, as in tier[p] in {'host', 'disk'}")
                opts = tuple(self.build(e) for e in right.elts)
                parts.append(InSet(self.build(left), opts, isinstance(op, ast.NotIn), self.loc(node)))
            else:
                sym = _CMPOPS.get(type(op))
                if sym is None:
                    raise self.fail(node, "only == != < <= > >= in and not in are allowed")
                parts.append(Compare(sym, self.build(left), self.build(right), self.loc(node)))
            left = right
        return parts[0] if len(parts) == 1 else BoolOp("and", tuple(parts), self.loc(node))

    def call(self, node: ast.Call) -> Expr:
        allowed = "only implies(a, b), all/any/sum(... for q in pages) and the spec's predicates can be called"
        if not isinstance(node.func, ast.Name):
            raise self.fail(node, f"'{ast.unparse(node.func)}' cannot be called: {allowed}")
        if node.keywords:
            raise self.fail(node, f"keyword arguments are not allowed: {allowed}")
        fname = node.func.id
        loc = self.loc(node)
        if fname == "implies":
            if len(node.args) != 2:
                raise self.fail(node, "implies takes exactly two arguments")
            return Implies(self.build(node.args[0]), self.build(node.args[1]), loc)
        if fname in ("all", "any", "sum"):
            return self.reduce(fname, node)
        pred = self.predicates.get(fname)
        if pred is None:
            raise self.fail(node, f"unknown function or predicate '{fname}'")
        if len(node.args) != len(pred.params):
            raise self.fail(node, f"predicate '{fname}' takes {len(pred.params)} argument(s)")
        binding = {name: self.build(arg) for name, arg in zip(pred.params, node.args, strict=True)}
        self.grow(node, _size_within(pred.body, self.limits.expr_nodes))
        depth = self.depths.get(id(node), 1) + _depth(pred.body)  # checked before inlining recurses
        if depth > self.limits.expr_depth:
            raise self.fail(node, self.limits.exceeded(
                "expr_depth", f"the expression nests {depth} levels deep with '{fname}' inlined"))
        return substitute(pred.body, binding)

    def reduce(self, kind: str, node: ast.Call) -> Expr:
        gen = node.args[0] if len(node.args) == 1 else None
        if not isinstance(gen, ast.GeneratorExp) or len(gen.generators) != 1:
            raise self.fail(node, f"{kind} takes one generator: {kind}(... for q in pages)")
        comp = gen.generators[0]
        if not isinstance(comp.target, ast.Name) or not (
                isinstance(comp.iter, ast.Name) and comp.iter.id in (PAGES, READERS)):
            raise self.fail(node, f"{kind} ranges over pages or readers: {kind}(... for q in pages), "
                            f"{kind}(... for s in readers)")
        body = self.build(gen.elt)
        for cond in comp.ifs:
            guard = self.build(cond)
            body = IfExp(guard, body, Const(0, guard.loc)) if kind == "sum" else (
                Implies(guard, body) if kind == "all" else BoolOp("and", (guard, body)))
        return Reduce(kind, comp.target.id, body, self.loc(node), comp.iter.id)
