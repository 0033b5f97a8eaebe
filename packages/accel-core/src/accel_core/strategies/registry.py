"""Strategy names -> descriptions and lazy factories.

Every strategy is described by an :class:`~accel_base.engine_description.EngineDescription`
that its package publishes in the ``accel.strategies`` entry-point group::

    [project.entry-points."accel.strategies"]
    deepspeed = "accel_backends.deepspeed.description:DESCRIPTION"

A strategy's module is imported only when the strategy is chosen. An entry point may also name a
factory ``factory(kwargs_handlers=(), **options) -> Strategy`` directly (a ``Strategy`` subclass
is one). accel-core publishes its own strategies the same way and keeps their descriptions at
hand too (:data:`~accel_core.built_in_engines.BUILT_IN`), so a source checkout without
installed metadata works.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any, cast

from accel_base.engine_description import (
    ENTRY_POINT_GROUP,
    EngineDescription,
    describe_entry_point,
    engine_for,
)
from accel_core.built_in_engines import BUILT_IN, ENGINE_HINT, ENGINE_PACKAGE
from accel_core.strategies.base import Strategy

__all__ = [
    "ENTRY_POINT_GROUP",
    "UnknownStrategyError",
    "available_strategies",
    "create_strategy",
    "describe_strategy",
    "get_strategy_factory",
    "register_strategy",
    "strategy_descriptions",
]

_registered: dict[str, Callable[..., Strategy]] = {}


class UnknownStrategyError(ValueError):
    """The chosen strategy name is not registered (not installed, or misspelt)."""


def register_strategy(name: str, factory: Callable[..., Strategy]) -> None:
    """Register ``factory`` under ``name`` in this process (tests, plugins without metadata)."""
    _registered[name.lower()] = factory


@cache
def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """The group's entry points by name, read once per process (each read scans every installed
    distribution)."""
    return {ep.name.lower(): ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _load(entry_point: importlib.metadata.EntryPoint) -> EngineDescription:
    try:
        return describe_entry_point(entry_point)
    except Exception as error:
        raise UnknownStrategyError(
            f"strategy {entry_point.name!r}: its entry point {entry_point.value!r} (group "
            f"{ENTRY_POINT_GROUP!r}, package {getattr(entry_point.dist, 'name', '?')}) does not "
            f"load: {type(error).__name__}: {error}"
        ) from error


def strategy_descriptions() -> dict[str, EngineDescription]:
    """The description of every installed strategy, by name (built-ins included). Imports the
    description module of each; one that does not load is left out with a warning (choosing it
    by name raises the error)."""
    found = dict(BUILT_IN)
    for entry_point in _entry_points().values():
        try:
            description = _load(entry_point)
        except UnknownStrategyError as error:
            warnings.warn(str(error), RuntimeWarning, stacklevel=2)
            continue
        found[description.name] = description
    return found


def describe_strategy(name: str) -> EngineDescription | None:
    """The description of the strategy ``name`` (or an alias of it); ``None`` if none is
    installed. Loads only that strategy's entry point when ``name`` is its name."""
    key = name.strip().lower()
    entry_point = _entry_points().get(key)
    if entry_point is not None:
        return _load(entry_point)
    return engine_for(key, BUILT_IN) or engine_for(key, strategy_descriptions())


def available_strategies() -> list[str]:
    """Every strategy name that can be created here, sorted (imports no strategy)."""
    return sorted({*BUILT_IN, *_entry_points(), *_registered})


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
    key = name.strip().lower()
    if key in _registered:
        return _registered[key]
    description = describe_strategy(key)
    if description is not None:
        if description.name in _registered:
            return _registered[description.name]
        return cast("Callable[..., Strategy]", description.load_strategy())
    raise UnknownStrategyError(_unknown_message(name))


def _unknown_message(name: str) -> str:
    """What an error says about the strategy ``name`` no installed package provides: the installed
    strategies, the installed version of ``ENGINE_PACKAGE`` (if any) and ``ENGINE_HINT``, what to
    install (:mod:`accel_core.built_in_engines`)."""
    known = ", ".join(repr(n) for n in available_strategies())
    installed = installed_version(ENGINE_PACKAGE)
    provider = (
        f"; {ENGINE_PACKAGE} {installed} is installed but does not provide the {name} strategy"
        if installed is not None
        else ""
    )
    return (
        f"strategy {name!r} is not installed{provider}. Installed strategies: {known}. "
        f"{ENGINE_HINT}"
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
