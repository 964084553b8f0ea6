"""Checking what an engine hands in: token ids, sequence ids, limits, collections, timeouts, devices.
Bad input has one road out, ``BadInputError`` with a message naming the argument, and changes
nothing."""

from __future__ import annotations

import operator
from array import array
from collections.abc import Sequence
from typing import Any

from .errors import BadInputError
from .index import token_array

MAX_TOKEN = (1 << 64) - 1


def check_tokens(tokens: object, what: str = "tokens") -> Sequence[int]:
    """``tokens`` as unsigned 64-bit ints (checked by the array conversion, in C); BadInputError for
    anything that is not a sequence of integers in [0, 2**64).  (``bool`` is an int in Python and is
    accepted as 0/1; numpy integers are accepted.)"""
    if tokens.__class__ is list and len(tokens) <= 4:  # type: ignore[arg-type]
        small: list[Any] = tokens  # type: ignore[assignment]
        if all(t.__class__ is int and 0 <= t <= MAX_TOKEN for t in small):
            return small
    if tokens.__class__ is not tuple and (isinstance(tokens, (str, bytes, bytearray)) or not isinstance(
            tokens, (Sequence, array)) and not hasattr(tokens, "__array__")):  # (a tuple is a sequence: no ABC check)
        raise BadInputError(f"{what} must be a sequence of ints, got {type(tokens).__name__}")
    try:
        return token_array(tokens)  # type: ignore[arg-type]
    except (TypeError, OverflowError, ValueError):
        pass
    try:
        seq = list(tokens)  # type: ignore[call-overload]
    except TypeError:  # a 0-d array or a numpy scalar: array-like, but not a sequence
        raise BadInputError(f"{what} must be a sequence of ints, got {type(tokens).__name__} "
                            f"{_shown(tokens)}") from None
    for i, t in enumerate(seq):
        try:
            value = operator.index(t)
        except TypeError:
            raise BadInputError(f"{what}[{i}] must be an int, got {type(t).__name__} {_shown(t)}") from None
        if not 0 <= value <= MAX_TOKEN:
            raise BadInputError(f"{what}[{i}] must be in [0, 2**64), got {value}") from None
    raise BadInputError(f"{what} cannot be read as 64-bit token ids")


def one_token_each(seq_ids: list[Any], tokens: list[Any]) -> array[int] | None:
    """The token of each of ``tokens`` (an unsigned 64-bit array) when every one is a list of exactly one
    integer in [0, 2**64) and every sequence id a non-empty str (a decode step), checked in a few passes
    that run in C (the array conversion checks the integers as ``check_tokens`` does); None when any is
    otherwise (then check each with ``check_seq_id`` and ``check_tokens``)."""
    n, count = len(tokens), operator.countOf
    if not n or count(map(type, tokens), list) != n or count(map(type, seq_ids), str) != len(seq_ids) or "" in seq_ids:
        return None
    try:
        return array("Q", [t for (t,) in tokens])
    except (TypeError, ValueError, OverflowError):
        return None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_seq_id(seq_id: object) -> str:
    """A sequence id: a non-empty str."""
    if not isinstance(seq_id, str) or not seq_id:
        raise BadInputError(f"sequence id must be a non-empty str, got {seq_id!r}")
    return seq_id


def check_limit(limit: object) -> int | None:
    """A lookup limit: an int >= 0, or None."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BadInputError(f"limit must be an int >= 0 or None, got {limit!r}")
    return limit  # type: ignore[return-value]


def check_items(values: object, what: str) -> list[Any]:
    """``values`` as a list; BadInputError unless it is an iterable other than a str or bytes."""
    if isinstance(values, (str, bytes)):
        raise BadInputError(f"{what} must be an iterable of items, not a single {type(values).__name__}")
    try:
        return list(values)  # type: ignore[call-overload]
    except TypeError:
        raise BadInputError(f"{what} must be an iterable, got {type(values).__name__}") from None


def check_timeout(timeout: object) -> float | None:
    """A timeout: a number of seconds >= 0, or None."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout >= 0):
        raise BadInputError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
    return timeout  # type: ignore[return-value]


def check_device(device: object) -> Any:
    """``device`` as a ``torch.device``."""
    import torch

    try:
        return torch.device(device)  # type: ignore[call-overload]
    except (TypeError, ValueError, RuntimeError) as exc:
        raise BadInputError(f"device must name a torch device, got {device!r} ({exc})") from None


Spans = Sequence[tuple[int, int, str]] | None


def token_types(spans: Spans, n: int) -> list[str | None] | None:
    """The type of each of ``n`` tokens from ``(start, end, type_name)`` spans; BadInputError if malformed."""
    if spans is None:
        return None
    out: list[str | None] = [None] * n
    try:
        items = list(spans)
    except TypeError:
        raise BadInputError(f"types must be a sequence of (start, end, type_name) spans, got {spans!r}") from None
    for span in items:
        if not (isinstance(span, tuple) and len(span) == 3 and isinstance(span[2], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in span[:2])
                and 0 <= span[0] < span[1] <= n):
            raise BadInputError(f"a type span must be (start, end, type_name) with 0 <= start < end <= {n}, "
                                f"got {span!r}")
        for i in range(span[0], span[1]):
            out[i] = span[2]
    return out
