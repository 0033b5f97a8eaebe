"""Features of Hugging Face Accelerate that accel does not run, and the error that says so.

Their names exist so that ported code imports (``from accel.utils import TERecipeKwargs``), their
classes can be built with Accelerate's fields and defaults, and their availability checks answer
truthfully. Using one -- calling the function, passing the object to ``Accelerator`` -- raises
:class:`OutOfScopeError`, naming the feature and what to use instead.
"""

from __future__ import annotations

import importlib.util
from typing import ClassVar

from accel_core.kwargs_handlers import KwargsHandler
from accel_ops.out_of_scope import OutOfScopeError, out_of_scope

__all__ = ["OutOfScopeError", "OutOfScopeKwargsHandler", "is_importable", "out_of_scope"]


def is_importable(module: str) -> bool:
    """Whether ``module`` could be imported here (nothing is imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class OutOfScopeKwargsHandler(KwargsHandler):
    """A kwargs handler of a feature accel does not run.

    It is built like Accelerate's (same fields, defaults and checks); ``Accelerator`` refuses it
    with :meth:`unsupported_error`. Subclasses set ``feature`` and ``instead``.
    """

    feature: ClassVar[str]
    instead: ClassVar[str]

    def unsupported_error(self) -> OutOfScopeError:
        """The error ``Accelerator(kwargs_handlers=[...])`` raises for this handler."""
        return out_of_scope(f"{type(self).__name__} ({self.feature})", self.instead)
