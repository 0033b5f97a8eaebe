"""The import side of the ``accelerate`` alias: a finder that answers ``accelerate[.X]`` with accel.

``accelerate.X`` is accel's own module ``accel.X`` (the same object in ``sys.modules`` under both
names, so identity and ``isinstance`` checks hold). ``accelerate`` itself is a thin view of
``accel``: every name it has is ``accel``'s own object, but its ``__version__`` is the Accelerate
API version accel implements, since libraries compare it with the Accelerate releases they know.
"""

from __future__ import annotations

import importlib
import importlib.machinery
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

#: The Hugging Face Accelerate release whose public API accel implements.
ACCELERATE_API_VERSION = "1.15.0"
ALIAS = "accelerate"
TARGET = "accel"


def target_name(name: str) -> str | None:
    """``accel[.X]`` for ``accelerate[.X]``; None for any other module name."""
    if name == ALIAS:
        return TARGET
    if name.startswith(ALIAS + "."):
        return TARGET + name[len(ALIAS) :]
    return None


def make_view(accel: ModuleType) -> ModuleType:
    """The ``accelerate`` module: ``accel``'s names, Accelerate's API version."""
    view = ModuleType(ALIAS, accel.__doc__)
    view.__version__ = ACCELERATE_API_VERSION  # type: ignore[attr-defined]
    view.__path__ = list(accel.__path__)
    view.__file__ = accel.__file__
    view.__all__ = list(getattr(accel, "__all__", []))  # type: ignore[attr-defined]

    def __getattr__(name: str) -> Any:
        return getattr(accel, name)

    def __dir__() -> list[str]:
        return sorted(set(dir(accel)) | set(vars(view)))

    view.__getattr__ = __getattr__  # type: ignore[method-assign]
    view.__dir__ = __dir__  # type: ignore[method-assign]
    return view


class AliasLoader:
    """Hands the import system accel's already executed module instead of a new one (a loader
    by protocol: ``importlib.abc`` is not imported, it would cost the start-up hook an import of
    ``importlib.resources``)."""

    def __init__(self, target: str, origin: Callable[[], str | None]) -> None:
        self.target = target
        self._origin = origin
        self._target_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        if self.target == TARGET:
            import logging  # loaded by then in any program that imports accelerate

            logging.getLogger("accel.as_accelerate").debug(
                "import accelerate loads accel (Accelerate API %s), switched on by %s",
                ACCELERATE_API_VERSION,
                self._origin(),
            )
            return make_view(module)
        self._target_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias spec on accel's module: give it its own back, so
        # ``accel.X.__spec__.name`` stays ``"accel.X"`` (reload, pickling by reference).
        if self._target_spec is not None:
            module.__spec__ = self._target_spec


class AliasFinder:
    """First on ``sys.meta_path`` while the alias is on: ``accelerate[.X]`` -> accel (a meta path
    finder by protocol)."""

    def __init__(self, origin: Callable[[], str | None]) -> None:
        self._origin = origin

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        name = target_name(fullname)
        if name is None:
            return None
        found = _find_spec(name)
        if found is None:
            return None  # accel has no such module: the import fails as it would in Accelerate
        return importlib.machinery.ModuleSpec(
            fullname,
            AliasLoader(name, self._origin),
            is_package=found.submodule_search_locations is not None,
        )

    def find_distributions(self, context: Any = None) -> Any:
        """The ``accelerate`` distribution (see :mod:`accel._alias_metadata`)."""
        from accel._alias_metadata import find_alias_distributions

        return find_alias_distributions(context)


def _find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    # importlib.util is imported when first needed: the start-up hook imports this module, and
    # importlib.util brings contextlib and re with it
    import importlib.util

    return importlib.util.find_spec(name)
