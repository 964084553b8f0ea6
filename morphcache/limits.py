"""Input limits: stated up front, checked before work starts, each named in its error message.

A spec or a trace is read from a file someone else may have written.  Every way its size can make
morphcache run long or use much memory has a limit here, checked before the work it would cost::

    limit             default     bounds                                              checked by
    spec_bytes        1 MiB       the size of each spec file (extends chain too)      spec loader
    extends_depth     8           files in one extends chain                          spec loader
    yaml_values       100000      values in a spec, each alias counted at every use   spec loader
    yaml_depth        32          nesting of YAML mappings and lists                  spec loader
    expr_chars        4000        characters of one expression                        expression parser
    expr_depth        64          nesting of one expression, predicates inlined       expression parser
    expr_nodes        5000        nodes of one expression, predicates inlined         expression parser
    pages             32          pages of the checked instance (file or override)    spec loader
    readers           8           readers of the checked instance                     spec loader
    int_abs           2**63 - 1   magnitude of every integer a spec writes or folds   spec loader
    trace_line_bytes  1 MiB       one line of a JSONL trace                           trace reader

The check itself (Z3) has a separate overall deadline (``morphcache check --deadline``).

On the command line ``--input-limit NAME=N`` (repeatable) raises or lowers one; in Python pass
``Limits(pages=64)`` to ``load_spec`` or ``load_trace``.  The expression and YAML depths have a
ceiling (``CEILINGS``): the parsers recurse, and past it Python's own stack would be the limit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from morphcache.errors import InputError


@dataclass(frozen=True)
class Limits:
    """The input limits (see the module docstring for what each one bounds)."""

    spec_bytes: int = 1 << 20
    extends_depth: int = 8
    yaml_values: int = 100_000
    yaml_depth: int = 32
    expr_chars: int = 4_000
    expr_depth: int = 64
    expr_nodes: int = 5_000
    pages: int = 32
    readers: int = 8
    int_abs: int = 2**63 - 1
    trace_line_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LimitError(f.name, f"must be an integer >= 1, got {value!r}")
            ceiling = CEILINGS.get(f.name)
            if ceiling is not None and value > ceiling:
                raise LimitError(f.name, f"at most {ceiling} (the parsers recurse once per level), got {value}")

    def exceeded(self, name: str, what: str) -> str:
        """The message for ``what`` going past limit ``name``: says the limit and how to raise it."""
        return f"{what}, above the limit {name}={getattr(self, name)} (raise it with --input-limit {name}=N)"

    def replace(self, settings: dict[str, int]) -> Limits:
        """These limits with ``settings`` (name -> value) changed; a :class:`LimitError` names a bad one."""
        known = {f.name for f in dataclasses.fields(self)}
        for name in settings:
            if name not in known:
                raise LimitError(name, f"no such limit (limits: {', '.join(sorted(known))})")
        return dataclasses.replace(self, **settings)


CEILINGS = {"expr_depth": 200, "yaml_depth": 200}

DEFAULT = Limits()


class LimitError(InputError, ValueError):
    """A limit given a value it cannot have (``limit NAME: message``)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"limit {name}", message)
        self.name = name


def parse_setting(text: str) -> tuple[str, int]:
    """``NAME=N`` (dashes in NAME read as underscores) -> ``(name, n)``; ValueError if malformed."""
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not name:
        raise ValueError(f"expected NAME=N, got {text!r}")
    try:
        number = int(value.strip().replace("_", ""), 0)
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {value.strip()!r}") from None
    return name, number
