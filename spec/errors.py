"""Spec errors: one line, ``file:line:col: message``, never a traceback."""

from __future__ import annotations

from morphcache.errors import LocatedError


class SpecError(LocatedError):
    """A problem in a spec file (or a file of its ``extends:`` chain), located at ``path:line:col``."""
