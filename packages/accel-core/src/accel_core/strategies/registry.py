"""Strategy names -> lazy factories.

A factory is imported only when its strategy is chosen. Third-party packages (accel-backends)
add strategies through the ``accel.strategies`` entry-point group::

    [project.entry-points."accel.strategies"]
    deepspeed = "accel_backends.deepspeed:DeepSpeedStrategy"

An entry point names a callable ``factory(kwargs_handlers=(), **options) -> Strategy`` (a
``Strategy`` subclass is one). accel-core registers its own strategies the same way in its
pyproject and keeps a built-in table too, so a source checkout without installed metadata works.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from typing import Any

from accel_core.strategies.base import Strategy

ENTRY_POINT_GROUP = "accel.strategies"

# name -> "module:attribute", imported on use
_BUILT_IN = {
    "single_device": "accel_core.strategies.single_device:SingleDeviceStrategy",
    "ddp": "accel_core.strategies.ddp:DDPStrategy",
}

# Strategies other packages provide: name -> what to install for it.
_PROVIDERS = {
    "deepspeed": "accel-backends[deepspeed]",
    "fsdp": "accel-backends",
    "xla": "accel-backends[xla]",
}

# Names users write that mean a registered strategy.
_ALIASES = {
    "no": "single_device",
    "single": "single_device",
    "single-device": "single_device",
    "multi_cpu": "ddp",
    "multi_gpu": "ddp",
}

_registered: dict[str, Callable[..., Strategy]] = {}


class UnknownStrategyError(ValueError):
    """The chosen strategy name is not registered (not installed, or misspelt)."""


def register_strategy(name: str, factory: Callable[..., Strategy]) -> None:
    """Register ``factory`` under ``name`` in this process (tests, plugins without metadata)."""
    _registered[name.lower()] = factory


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name.lower(): ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_strategies() -> list[str]:
    """Every strategy name that can be created here, sorted."""
    return sorted({*_BUILT_IN, *_entry_points(), *_registered})


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or ``None``."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def get_strategy_factory(name: str) -> Callable[..., Strategy]:
    """The factory registered under ``name`` (case-insensitive; aliases like ``multi_gpu`` work).

    Raises :class:`UnknownStrategyError` listing the known names and the package to install.
    """
    key = _ALIASES.get(name.strip().lower(), name.strip().lower())
    if key in _registered:
        return _registered[key]
    found = _entry_points().get(key)
    if found is not None:
        return found.load()
    if key in _BUILT_IN:
        return _load(_BUILT_IN[key])
    known = ", ".join(repr(n) for n in available_strategies())
    if key in _PROVIDERS:
        provider = _PROVIDERS[key].split("[")[0]
        installed = installed_version(provider)
        if installed is not None:
            raise UnknownStrategyError(
                f"strategy {name!r}: {provider} {installed} is installed but does not provide "
                f"the {name} strategy yet. Installed strategies: {known}."
            )
        raise UnknownStrategyError(
            f"strategy {name!r} is not installed. Install it with "
            f"`pip install {_PROVIDERS[key]}`. Installed strategies: {known}."
        )
    raise UnknownStrategyError(
        f"unknown strategy {name!r}. Installed strategies: {known}. DeepSpeed, FSDP and XLA come "
        "with `pip install accel-backends[deepspeed]` (or `accel-backends`, "
        "`accel-backends[xla]`)."
    )


def create_strategy(name: str, **options: Any) -> Strategy:
    """Create the strategy registered under ``name`` with ``options``."""
    strategy = get_strategy_factory(name)(**options)
    if not isinstance(strategy, Strategy):
        raise TypeError(
            f"the factory of strategy {name!r} returned {type(strategy).__name__}, not a "
            "accel_core.Strategy; fix the entry point in the package that registers it."
        )
    return strategy
