"""Spec errors: one line, ``file:line:col: message``, never a traceback."""

from __future__ import annotations


class SpecError(Exception):
    """A problem in a spec file, located at ``path:line:col``."""

    def __init__(self, path: str, line: int, col: int, message: str) -> None:
        super().__init__(f"{path}:{line}:{col}: {message}")
        self.path = path
        self.line = line
        self.col = col
        self.message = message
