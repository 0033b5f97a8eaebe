"""Opt-in: make ``import accelerate`` load accel, for code nobody can edit.

transformers' ``Trainer``, peft, trl and ``from_pretrained(device_map=...)`` import
``accelerate`` by name. While the alias is on, that import (and every ``accelerate.X``) loads
accel's own modules, also where Hugging Face Accelerate is installed too (it stays installed and
unused), and ``importlib.metadata.version("accelerate")`` and ``accelerate.__version__`` answer
the Accelerate API version accel implements (:data:`ACCELERATE_API_VERSION`); ``accel.__version__``
stays accel-kit's own. Three ways to switch it on, each before the first library that uses
accelerate is imported:

- ``ACCEL_AS_ACCELERATE=1`` in the environment of any interpreter where accel-kit is installed
  (a start-up hook; with the variable unset it costs one dictionary lookup);
- ``accel launch --as-accelerate script.py`` (the workers get the variable);
- ``import accel.as_accelerate; accel.as_accelerate.install()`` at the top of a script or
  notebook.

Processes started from a process where it is on inherit it (the variable is set for them).
``accel env`` and a debug line of the ``accel.as_accelerate`` logger say that it is on and where
it was switched on.
"""

from __future__ import annotations

import os
import sys
import warnings

from accel._alias_import import ACCELERATE_API_VERSION, ALIAS, AliasFinder, target_name

__all__ = [
    "ACCELERATE_API_VERSION",
    "active_origin",
    "install",
    "install_from_environment",
    "uninstall",
]

VARIABLE = "ACCEL_AS_ACCELERATE"
ORIGIN_VARIABLE = "ACCEL_AS_ACCELERATE_ORIGIN"
_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")
#: Libraries that record accelerate's version when they are imported.
_RECORDING_LIBRARIES = ("transformers", "peft", "trl")

_finder: AliasFinder | None = None
_origin: str | None = None


def active_origin() -> str | None:
    """Where the alias was switched on (``"ACCEL_AS_ACCELERATE=1 in the environment"``,
    ``"accel launch --as-accelerate"``, ``"install() at script.py:3"``); None when it is off."""
    return _origin if _finder is not None else None


def install(origin: str | None = None) -> None:
    """Switch the alias on in this interpreter and the processes it starts.

    Call it before the first import of a library that uses accelerate. Calling it again does
    nothing. Raises :class:`RuntimeError` when another ``accelerate`` is already imported (its
    objects would mix with accel's); warns when transformers, peft or trl were imported first
    (they may have recorded the other accelerate's version).
    """
    global _finder, _origin
    if _finder is not None:
        return
    loaded = sys.modules.get(ALIAS)
    if loaded is not None:
        raise RuntimeError(
            f"accel.as_accelerate.install(): accelerate is already imported from "
            f"{getattr(loaded, '__file__', '?')}; call install() at the top of the script, before "
            f"anything imports accelerate (transformers, peft, trl), or set {VARIABLE}=1 in the "
            f"environment"
        )
    early = [name for name in _RECORDING_LIBRARIES if name in sys.modules]
    if early:
        warnings.warn(
            f"accel.as_accelerate.install() after {', '.join(early)} was imported: it may have "
            f"recorded another accelerate's version; call install() first",
            stacklevel=2,
        )
    if origin is None:
        caller = sys._getframe(1)
        origin = f"accel.as_accelerate.install() at {caller.f_code.co_filename}:{caller.f_lineno}"
    _origin = origin
    _finder = AliasFinder(active_origin)
    sys.meta_path.insert(0, _finder)
    os.environ[VARIABLE] = "1"
    os.environ.setdefault(ORIGIN_VARIABLE, origin)


def uninstall() -> None:
    """Switch the alias off: remove the finder, the ``accelerate`` modules it made and the
    variables it set. Objects already imported through it stay accel's."""
    global _finder, _origin
    if _finder is None:
        return
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    for name in [name for name in sys.modules if target_name(name) is not None]:
        del sys.modules[name]
    if os.environ.get(ORIGIN_VARIABLE) == _origin:
        del os.environ[ORIGIN_VARIABLE]
    os.environ.pop(VARIABLE, None)
    _finder = None
    _origin = None


def install_from_environment() -> None:
    """The start-up hook: switch the alias on when ``ACCEL_AS_ACCELERATE`` says so.

    ``1``, ``true``, ``yes``, ``on`` switch it on (``ACCEL_AS_ACCELERATE_ORIGIN`` names who set
    it); ``0``, ``false``, ``no``, ``off`` or unset leave it off; any other value leaves it off
    with a warning on stderr naming the value.
    """
    value = os.environ.get(VARIABLE, "").strip().lower()
    if value in _OFF:
        return
    if value not in _ON:
        print(
            f"accel: {VARIABLE}={os.environ[VARIABLE]!r} is not one of {', '.join(_ON)} (on) or "
            f"{', '.join(repr(v) for v in _OFF)} (off); `import accelerate` is left alone",
            file=sys.stderr,
        )
        return
    install(os.environ.get(ORIGIN_VARIABLE) or f"{VARIABLE}=1 in the environment")
