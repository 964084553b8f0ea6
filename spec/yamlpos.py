"""Load YAML safely while keeping the file position of every value.

A spec is data: it is composed with PyYAML's safe composer (no tags are constructed, nothing is
executed) and turned into plain dicts, lists and scalars that remember ``(line, col)``.
"""

from __future__ import annotations

from typing import Any

import yaml

from .errors import SpecError


class YMap(dict[str, Any]):
    """A mapping that remembers its file and where it and each of its values start."""

    file: str = ""
    line: int = 0
    col: int = 0
    marks: dict[str, tuple[int, int]]


class YList(list[Any]):
    """A sequence that remembers its file and where it and each of its items start."""

    file: str = ""
    line: int = 0
    col: int = 0
    marks: list[tuple[int, int]]


def _scalar(node: yaml.ScalarNode) -> Any:
    tag = node.tag
    value = node.value
    if tag.endswith(":int"):
        return int(value.replace("_", ""), 0)
    if tag.endswith(":bool"):
        return value.lower() in ("true", "yes", "on")
    if tag.endswith(":null"):
        return None
    if tag.endswith(":float"):
        return float(value)
    return value


def _pos(node: yaml.Node) -> tuple[int, int]:
    """Position of a scalar's first character (inside its quotes, if quoted)."""
    line, col = node.start_mark.line + 1, node.start_mark.column + 1
    if isinstance(node, yaml.ScalarNode) and node.style in ("'", '"'):
        col += 1
    return line, col


def _convert(node: yaml.Node, path: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        out = YMap()
        out.file = path
        out.line, out.col = _pos(node)
        out.marks = {}
        for key_node, value_node in node.value:
            key = _convert(key_node, path)
            if not isinstance(key, (str, int)):
                line, col = _pos(key_node)
                raise SpecError(path, line, col, "mapping keys must be plain names")
            key = str(key)
            if key in out:
                line, col = _pos(key_node)
                raise SpecError(path, line, col, f"duplicate key '{key}'")
            out[key] = _convert(value_node, path)
            out.marks[key] = _pos(value_node)
        return out
    if isinstance(node, yaml.SequenceNode):
        seq = YList(_convert(item, path) for item in node.value)
        seq.file = path
        seq.line, seq.col = _pos(node)
        seq.marks = [_pos(item) for item in node.value]
        return seq
    assert isinstance(node, yaml.ScalarNode)
    return _scalar(node)


def load_yaml(text: str, path: str) -> YMap:
    """Parse ``text``; raise :class:`SpecError` at the offending position on any YAML error."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise SpecError(path, line, col, f"YAML syntax error: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:  # pragma: no cover - non-marked errors are rare
        raise SpecError(path, 1, 1, f"YAML error: {exc}") from None
    if node is None:
        raise SpecError(path, 1, 1, "the spec file is empty")
    data = _convert(node, path)
    if not isinstance(data, YMap):
        raise SpecError(path, 1, 1, "a spec must be a YAML mapping at the top level")
    return data


def merge(base: YMap, patch: YMap) -> YMap:
    """``base`` overlaid with ``patch``: mappings merge key by key, anything else is replaced,
    and a ``null`` in ``patch`` deletes the key.  Positions follow whichever file a value came from."""
    out = YMap(base)
    out.file, out.line, out.col, out.marks = base.file, base.line, base.col, dict(base.marks)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
            out.marks.pop(key, None)
        elif isinstance(value, YMap) and isinstance(out.get(key), YMap):
            out[key] = merge(out[key], value)
            out.marks[key] = base.marks[key]
        else:
            out[key] = value
            out.marks[key] = patch.marks[key]
    return out
