"""Bad input has one road out: an :class:`InputError`, printed as one line, exit status 2.

::

    InputError                 "WHERE: MESSAGE"
     +-- LocatedError          "FILE:LINE:COL: MESSAGE"    a problem inside a file (1-based line and column)
     |    +-- SpecError        a spec or a file of its extends chain          (morphcache.spec.errors)
     |    +-- TraceFormatError a line of a JSONL trace                        (morphcache.workloads.trace)
     +-- UsageError            "PROG: OPTION: MESSAGE"     a command-line argument (it names no file)

The command line catches :class:`InputError` in one place (``morphcache.cli.main``) and prints
``str(exc)``; nothing else is caught there, so any other exception is a bug in morphcache.  The
runtime API has its own family (``morphcache.runtime.MorphcacheError``) for an embedding engine.
"""

from __future__ import annotations


class InputError(Exception):
    """A problem in something a user gave morphcache; ``str()`` is the whole one-line message."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


class LocatedError(InputError):
    """A problem at ``path:line:col`` of a file (both 1-based; column 1 when only the line is known)."""

    def __init__(self, path: str, line: int, col: int, message: str) -> None:
        super().__init__(f"{path}:{line}:{col}", message)
        self.path = path
        self.line = line
        self.col = col


class UsageError(InputError):
    """A bad command-line argument: ``prog: option: message``, e.g. ``morphcache check: --timeout-ms: ...``.

    ``option`` is the flag as typed (``--timeout-ms``), the name of a positional argument
    (``spec``), or empty for a problem with the command line as a whole.
    """

    def __init__(self, prog: str, option: str, message: str) -> None:
        super().__init__(f"{prog}: {option}" if option else prog, message)
        self.prog = prog
        self.option = option
