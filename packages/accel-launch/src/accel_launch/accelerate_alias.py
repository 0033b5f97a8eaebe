"""Whether ``import accelerate`` loads accel, and the variables that switch it on in workers.

accel-kit's start-up hook (``accel.as_accelerate``) makes ``import accelerate`` load the ``accel``
package when ``ACCEL_AS_ACCELERATE`` is true; ``ACCEL_AS_ACCELERATE_ORIGIN`` says who switched it
on, for messages. accel-launch writes both for the workers of ``accel launch --as-accelerate`` and
reads them (or asks the hook, when it is loaded) for ``accel env``. It never imports accel-kit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import ModuleType

SWITCH_VARIABLE = "ACCEL_AS_ACCELERATE"
ORIGIN_VARIABLE = "ACCEL_AS_ACCELERATE_ORIGIN"
#: The origin the workers of ``accel launch --as-accelerate`` are given.
LAUNCH_ORIGIN = "accel launch --as-accelerate"
#: accel-kit's hook; when loaded, it is the one that knows.
HOOK_MODULE = "accel.as_accelerate"
_TRUE = ("1", "true", "yes", "on")


def switched_on_by(
    environ: Mapping[str, str] | None = None, modules: Mapping[str, ModuleType] | None = None
) -> str | None:
    """Who switched ``import accelerate`` -> accel on in this interpreter; None when it is off.

    When accel-kit's hook is loaded (``modules`` has ``accel.as_accelerate``, default
    ``sys.modules``), its ``active_origin()`` answers. Otherwise the environment does:
    ``ACCEL_AS_ACCELERATE`` true (1, true, yes, on; any case) means on, and the origin is
    ``ACCEL_AS_ACCELERATE_ORIGIN``, else ``ACCEL_AS_ACCELERATE=<value> in the environment``.
    """
    hook = (sys.modules if modules is None else modules).get(HOOK_MODULE)
    active_origin = getattr(hook, "active_origin", None)
    if callable(active_origin):
        origin = active_origin()
        return None if origin is None else str(origin)
    env = os.environ if environ is None else environ
    value = env.get(SWITCH_VARIABLE, "")
    if value.strip().lower() not in _TRUE:
        return None
    return env.get(ORIGIN_VARIABLE) or f"{SWITCH_VARIABLE}={value} in the environment"


STATUS_LABEL = "`import accelerate` loads accel"


def status(
    environ: Mapping[str, str] | None = None, modules: Mapping[str, ModuleType] | None = None
) -> str:
    """``yes (switched on by ORIGIN)``, or ``no (...)`` with how to switch it on."""
    origin = switched_on_by(environ, modules)
    if origin is None:
        return f"no (set {SWITCH_VARIABLE}=1 or run {LAUNCH_ORIGIN})"
    return f"yes (switched on by {origin})"


def status_line(
    environ: Mapping[str, str] | None = None, modules: Mapping[str, ModuleType] | None = None
) -> str:
    """The line ``accel env`` prints: whether ``import accelerate`` loads accel, and why."""
    return f"{STATUS_LABEL}: {status(environ, modules)}"


def worker_variables(origin: str = LAUNCH_ORIGIN) -> dict[str, str]:
    """The variables that make ``import accelerate`` load accel in a worker, naming ``origin``."""
    return {SWITCH_VARIABLE: "1", ORIGIN_VARIABLE: origin}
