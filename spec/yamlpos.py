"""Load YAML safely while keeping the file position of every value.

A spec is data: it is composed with PyYAML's safe composer (no tags are constructed, nothing is
executed) and turned into plain dicts, lists and scalars that remember ``(line, col)`` and the file
they were written in.  Size is bounded while composing, before anything is expanded: nesting
(``yaml_depth``) and the number of values once every alias is counted at each use (``yaml_values``),
so an alias bomb is refused at the collection that crosses the limit::

    a: &a [x, x, x, x, x, x, x, x, x, x]       10 values
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a]      8 * 11 + 1 values
    ...                                          each level multiplies: refused once past the limit

Scalars that YAML reads as numbers must be plain integers (``12``, ``-3``, ``0x1f``, ``1_000``) or
finite floats; YAML 1.1's octal (``012``) and base-60 (``1:30``) forms, ``.inf``, ``.nan`` and
integers beyond ``int_abs`` are located errors.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from morphcache.limits import DEFAULT, Limits

from .errors import SpecError


class YMap(dict[str, Any]):
    """A mapping that remembers its file and where it and each of its values start.

    After an ``extends:`` merge a mapping holds values from several files: ``files[key]`` is the
    file of ``key``'s value when it is not ``file``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.file = ""
        self.line = 0
        self.col = 0
        self.marks: dict[str, tuple[int, int]] = {}
        self.files: dict[str, str] = {}

    def where(self, key: str) -> tuple[str, int, int]:
        """``(file, line, col)`` of ``key``'s value."""
        line, col = self.marks[key]
        return self.files.get(key, self.file), line, col


class YList(list[Any]):
    """A sequence that remembers its file and where it and each of its items start."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.file = ""
        self.line = 0
        self.col = 0
        self.marks: list[tuple[int, int]] = []

    def where(self, index: int) -> tuple[str, int, int]:
        """``(file, line, col)`` of item ``index``."""
        line, col = self.marks[index]
        return self.file, line, col


def _pos(node: yaml.Node) -> tuple[int, int]:
    """Position of a scalar's first character (inside its quotes, if quoted)."""
    line, col = node.start_mark.line + 1, node.start_mark.column + 1
    if isinstance(node, yaml.ScalarNode) and node.style in ("'", '"'):
        col += 1
    return line, col


class _Composer(yaml.SafeLoader):
    """PyYAML's safe composer, with nesting and expanded size bounded as each node is composed."""

    def __init__(self, text: str, path: str, limits: Limits) -> None:
        super().__init__(text)
        self.path = path
        self.limits = limits
        self.depth = 0
        self.sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth), aliases expanded

    def fail(self, mark: Any, message: str) -> SpecError:
        return SpecError(self.path, mark.line + 1, mark.column + 1, message)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if id(node) not in self.sizes:
                raise self.fail(event.start_mark, f"alias *{event.anchor} is used inside its own anchor")
            return node
        self.depth += 1
        if self.depth > self.limits.yaml_depth:
            raise self.fail(event.start_mark, self.limits.exceeded(
                "yaml_depth", f"YAML nests more than {self.limits.yaml_depth} levels deep"))
        composed = super().compose_node(parent, index)
        assert composed is not None  # a non-alias event always composes a node
        self.depth -= 1
        if isinstance(composed, yaml.MappingNode):
            kids = [n for pair in composed.value for n in pair]
        else:
            kids = composed.value if isinstance(composed, yaml.SequenceNode) else []
        values = 1 + sum(self.sizes[id(k)][0] for k in kids)
        depth = 1 + max((self.sizes[id(k)][1] for k in kids), default=0)
        if values > self.limits.yaml_values:
            raise self.fail(composed.start_mark, self.limits.exceeded(
                "yaml_values", f"this value holds {values} values once its aliases are expanded"))
        if depth > self.limits.yaml_depth:
            raise self.fail(composed.start_mark, self.limits.exceeded(
                "yaml_depth", f"this value nests {depth} levels deep once its aliases are expanded"))
        self.sizes[id(composed)] = (values, depth)
        return composed


def _int(text: str, fail: Any, limits: Limits) -> int:
    digits = text.replace("_", "")
    body = digits.lstrip("+-")
    if ":" in body:
        raise fail(f"'{text}' is a base-60 number in YAML 1.1; write the integer, or quote it for a string")
    if len(body) > 1 and body[0] == "0" and body[1] not in "xXbBoO":
        raise fail(f"'{text}' has a leading 0, which YAML 1.1 reads as octal; write it without the 0, "
                   "or quote it for a string")
    if len(body) > 4000:
        raise fail(limits.exceeded("int_abs", f"an integer of {len(body)} digits"))
    try:
        value = int(digits, 0)
    except ValueError:
        raise fail(f"'{text}' is not an integer") from None
    if abs(value) > limits.int_abs:
        raise fail(limits.exceeded("int_abs", f"integer {value} is too large"))
    return value


def _scalar(node: yaml.ScalarNode, path: str, limits: Limits) -> Any:
    tag, value = node.tag, node.value

    def fail(message: str) -> SpecError:
        return SpecError(path, *_pos(node), message)

    if tag.endswith(":int"):
        return _int(value, fail, limits)
    if tag.endswith(":bool"):
        return value.lower() in ("true", "yes", "on")
    if tag.endswith(":null"):
        return None
    if tag.endswith(":float"):
        try:
            number = float(value.replace("_", ""))
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise fail(f"'{value}' is not a finite number (quote it for a string)")
        return number
    return value


def _convert(node: yaml.Node, path: str, limits: Limits) -> Any:
    if isinstance(node, yaml.MappingNode):
        out = YMap()
        out.file = path
        out.line, out.col = _pos(node)
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else ""  # as written: `on`, `012`
            if not key:
                line, col = _pos(key_node)
                raise SpecError(path, line, col, "mapping keys must be plain names")
            if key in out:
                line, col = _pos(key_node)
                raise SpecError(path, line, col, f"duplicate key '{key}'")
            out[key] = _convert(value_node, path, limits)
            out.marks[key] = _pos(value_node)
        return out
    if isinstance(node, yaml.SequenceNode):
        seq = YList()
        for item in node.value:  # a loop, not a generator: one stack frame per level of nesting
            seq.append(_convert(item, path, limits))
        seq.file = path
        seq.line, seq.col = _pos(node)
        seq.marks = [_pos(item) for item in node.value]
        return seq
    assert isinstance(node, yaml.ScalarNode)
    return _scalar(node, path, limits)


def _yaml_error(exc: yaml.YAMLError, text: str, path: str) -> SpecError:
    """The located SpecError of a PyYAML error."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = exc.problem or exc.context or "malformed YAML"
        if exc.problem and exc.context:
            ctx = exc.context_mark
            at = f" at {ctx.line + 1}:{ctx.column + 1}" if ctx is not None and ctx is not mark else ""
            message = f"{exc.problem} ({exc.context}{at})"
        return SpecError(path, line, col, f"YAML syntax error: {message}")
    if isinstance(exc, yaml.reader.ReaderError):
        before = text[: exc.position]
        line = before.count("\n") + 1
        col = exc.position - (before.rfind("\n") + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return SpecError(path, line, col, f"YAML cannot contain the control character U+{code:04X}")
    return SpecError(path, 1, 1, f"YAML error: {exc}")  # pragma: no cover - PyYAML raises the two above


def load_yaml(text: str, path: str, limits: Limits = DEFAULT) -> YMap:
    """Parse ``text``; raise :class:`SpecError` at the offending position on any YAML error or limit."""
    try:
        composer = _Composer(text, path, limits)  # the reader refuses control characters here
        try:
            node = composer.get_single_node()
        finally:
            composer.dispose()
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, path) from None
    if node is None:
        raise SpecError(path, 1, 1, "the spec file is empty")
    data = _convert(node, path, limits)
    if not isinstance(data, YMap):
        raise SpecError(path, 1, 1, "a spec must be a YAML mapping at the top level")
    return data


def merge(base: YMap, patch: YMap) -> YMap:
    """``base`` overlaid with ``patch``: mappings merge key by key, anything else is replaced,
    and a ``null`` in ``patch`` deletes the key.  Positions (file, line, column) follow whichever
    file a value came from."""
    out = YMap(base)
    out.file, out.line, out.col = base.file, base.line, base.col
    out.marks, out.files = dict(base.marks), dict(base.files)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
            out.marks.pop(key, None)
            out.files.pop(key, None)
        elif isinstance(value, YMap) and isinstance(out.get(key), YMap):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
            out.marks[key] = patch.marks[key]
            out.files[key] = patch.files.get(key, patch.file)
    return out
