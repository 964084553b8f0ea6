"""A speed-up of the Triton CPU interpreter (``TRITON_INTERPRET=1``) for end-to-end runs.

Under the interpreter every call of a ``@triton.jit`` helper from inside a kernel re-patches the
``triton.language`` modules (an ``inspect.getmembers`` scan per module), although the kernel launch
that is running has already patched them and restores them when it ends::

    launch kernel          patch tl, tl.tensor, tl.math, ...        <- needed
      call attend_raw_span   patch again (scan, no effect)          <- ~40% of the run time
      call online_update     patch again (scan, no effect)
    end of launch          restore

``enable_fast_interpreter()`` skips the nested re-patch when the helper's language modules are
among those the running launch patched; the launch-level patch and its restore are unchanged, so the
interpreted semantics are the same.  It does nothing (and returns False) when the interpreter is not
in use or its internals are not the expected ones.

A nested patch is never restored by the interpreter (its scope is dropped), so a module a helper
patched once (``triton.language.core`` for ``tl.sum`` / ``tl.zeros``) stays patched; later nested
calls that would only patch it again are skipped too.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

_STATE: dict[str, Any] = {"enabled": False, "patched": None, "kept": frozenset()}


_LANGS: dict[int, tuple[Any, frozenset[int]]] = {}


class _NoScope:
    """The scope of a skipped nested patch: nothing to restore."""

    def restore(self) -> None:
        """Nothing was patched."""


def _langs(fn: Any, tl: Any) -> frozenset[int]:
    """ids of the ``triton.language`` modules visible from ``fn`` (what ``_patch_lang`` patches)."""
    key = id(fn)
    got = _LANGS.get(key)
    if got is None or got[0] is not fn:
        langs = frozenset(id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core))
        got = _LANGS[key] = (fn, langs)
    return got[1]


def enable_fast_interpreter() -> bool:
    """Install the nested-patch skip (idempotent); True if it is active."""
    if _STATE["enabled"]:
        return True
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    try:
        import triton.language as tl
        from triton.runtime import interpreter as interp
    except ImportError:  # pragma: no cover
        return False
    original = getattr(interp, "_patch_lang", None)
    if original is None or not hasattr(interp, "GridExecutor"):
        return False

    def patch_lang(fn: Any) -> Any:
        active = _STATE["patched"]
        langs = _langs(fn, tl)
        if active is not None and langs <= active | _STATE["kept"]:
            return _NoScope()
        scope = original(fn)
        if active is not None:
            _STATE["kept"] = _STATE["kept"] | langs  # nested patches are never restored
            return scope
        _STATE["patched"] = langs
        restore = scope.restore

        def restore_and_clear() -> None:
            _STATE["patched"] = None
            restore()

        scope.restore = restore_and_clear
        return scope

    interp._patch_lang = patch_lang
    _STATE.update(enabled=True, original=original)
    return True


def disable_fast_interpreter() -> None:
    """Put the interpreter's own ``_patch_lang`` back (no-op if the speed-up is not installed)."""
    if not _STATE["enabled"]:
        return
    from triton.runtime import interpreter as interp

    interp._patch_lang = _STATE["original"]
    _STATE.update(enabled=False, patched=None)
