"""Command-line arguments: a parser whose errors are one-line :class:`UsageError`, and shared options.

Every ``morphcache`` subcommand reports a bad argument the same way, one line and exit 2::

    morphcache check: --timeout-ms: must be an integer >= 1, got 0
    morphcache simulate: --trace: no trace file at 'x.jsonl'
    morphcache check: --input-limit: pages: must be an integer >= 1, got 0
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn

from morphcache.errors import UsageError
from morphcache.limits import LimitError, Limits, parse_setting


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are :class:`UsageError` (one line, exit 2), not a usage dump."""

    def error(self, message: str) -> NoReturn:
        option, sep, rest = message.partition(": ")
        if sep and option.startswith("argument "):
            raise UsageError(self.prog, option[len("argument "):].split("/")[0], rest)
        raise UsageError(self.prog, "", f"{message} (see {self.prog} --help)")


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    convert.__name__ = f"integer >= {low}"
    return convert


def fraction(text: str) -> float:
    """An argparse type: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {text!r}") from None
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1], got {text}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a number of seconds >= 0 (0: no deadline)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text}")
    return value


def _limit_setting(text: str) -> tuple[str, int]:
    try:
        return parse_setting(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_limit_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--input-limit NAME=N`` (repeatable): change one input limit (see ``morphcache.limits``)."""
    parser.add_argument("--input-limit", metavar="NAME=N", dest="input_limit", type=_limit_setting,
                        action="append", default=[],
                        help="change an input limit, e.g. --input-limit pages=64 (repeatable; the limits and their "
                             "defaults are listed in the README)")


def limits_of(args: argparse.Namespace, prog: str) -> Limits:
    """The :class:`Limits` that ``--input-limit`` settings give; a bad one is a :class:`UsageError`."""
    try:
        return Limits().replace(dict(args.input_limit))
    except LimitError as exc:
        raise UsageError(prog, "--input-limit", f"{exc.name}: {exc.message}") from None
