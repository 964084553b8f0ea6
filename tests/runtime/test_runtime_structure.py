"""The runtime's structure: its parts talk through public names only, and its modules stay small.

The scan reads every module of runtime/ as a syntax tree: an attribute ``x._name`` (not a dunder) is
a private read unless ``x`` is ``self``, ``cls`` or a class the module itself defines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
LONG = 300  # lines; a longer module says why in its docstring ("longer than most ...")


def private_reads(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every read of another object's private attribute in ``source``."""
    tree = ast.parse(source)
    own = {"self", "cls"} | {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in own:
            continue
        out.append((node.lineno, ast.unparse(node)))
    return sorted(out)


def test_the_scan_finds_private_reads() -> None:
    src = ("class A:\n"
           "    def f(self, other):\n"
           "        return self._x + A._y + other._z + self.pipe._w + other.__class__\n")
    assert private_reads(src) == [(3, "other._z"), (3, "self.pipe._w")]


@pytest.mark.parametrize("path", sorted(RUNTIME.glob("*.py")), ids=lambda p: p.name)
def test_no_part_reads_another_parts_private_names(path: Path) -> None:
    found = private_reads(path.read_text())
    assert not found, f"{path.name} reads private names of other objects: " + ", ".join(
        f"line {line}: {expr}" for line, expr in found)


@pytest.mark.parametrize("path", sorted(RUNTIME.glob("*.py")), ids=lambda p: p.name)
def test_a_long_module_says_why(path: Path) -> None:
    source = path.read_text()
    lines = source.count("\n")
    if lines <= LONG:
        return
    doc = ast.get_docstring(ast.parse(source)) or ""
    assert "longer than most" in " ".join(doc.lower().split()), (
        f"{path.name} has {lines} lines (over {LONG}) and its docstring does not say why it is longer than most")
