"""The strategies ``accel launch`` can choose: the built-in ones and the engines installed here.

An engine describes itself (an :class:`~accel_base.engine_description.EngineDescription`, found
through the ``accel.strategies`` entry-point group by accel-base's one reader): its ``--use_*``
flag, its launch options, its config-file section, its ``distributed_type`` and its launch check.
The launcher reads those descriptions and keeps no list of engines of its own. The same holds for
the mesh dimensions a ``ParallelismConfig`` sizes (:func:`dimensions`: accel-base's records of
Accelerate's dimensions, and those engines declare). The description types come from accel-base
(standard library only, always installed with the launcher); the engines come from the installed
packages: with accel-launch alone there are none, only the built-in strategies (``single_device``,
``ddp``: distributed types ``NO``, ``MULTI_CPU``, ``MULTI_GPU``), and no dimension. The
descriptions are read once per process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from accel_base import engine_description
from accel_base.engine_description import EngineDescription, engine_for
from accel_base.mesh_dimension import MeshDimension, all_dimensions
from accel_launch.errors import AccelLaunchError

#: The strategies every launch can choose, with or without accel-core's engines.
BUILT_IN_STRATEGIES = ("single_device", "ddp")
#: The config file's built-in ``distributed_type`` values -> the strategy each runs.
BUILT_IN_TYPES: Mapping[str, str | None] = {"NO": None, "MULTI_CPU": "ddp", "MULTI_GPU": "ddp"}

ENGINE_HINT = (
    "Engines come from packages that register an `accel.strategies` entry point "
    "(accel-backends provides deepspeed, fsdp and xla: `pip install accel-backends`)."
)


def installed() -> Mapping[str, EngineDescription]:
    """The engines the installed packages describe, by name, sorted by name (none with
    accel-launch alone)."""
    found = engine_description.installed_engines()
    return {name: found[name] for name in sorted(found)}


def dimensions() -> tuple[MeshDimension, ...]:
    """The mesh dimensions a ``ParallelismConfig`` may size here, each as accel-base's record:
    those of Accelerate's ``ParallelismConfig`` (accel-base's table), then those only the
    installed engines declare. None when no engine is installed: the ``ParallelismConfig``
    that reads the sizes comes with the engines (accel-core, accel-backends)."""
    engines = installed()
    if not engines:
        return ()
    return tuple(all_dimensions(engines.values()).values())


def strategy_names() -> list[str]:
    """Every strategy ``--strategy`` accepts: the built-in ones, then the installed engines."""
    return [*BUILT_IN_STRATEGIES, *(n for n in installed() if n not in BUILT_IN_STRATEGIES)]


def engine(name: str | None) -> EngineDescription | None:
    """The installed engine called ``name`` (or one of its aliases); ``None`` if none."""
    if not name:
        return None
    engines = installed()
    return engine_for(name, engines) if engines else None


def canonical_strategy(name: str, source: str) -> str:
    """The registered name of strategy ``name`` (from ``source``); raises AccelLaunchError naming
    the installed strategies when there is none."""
    key = name.strip().lower()
    if key in BUILT_IN_STRATEGIES:
        return key
    found = engine(key)
    if found is not None:
        return found.name
    raise AccelLaunchError(
        f"unknown strategy {name!r} ({source}). Installed strategies: "
        f"{', '.join(strategy_names())}. {ENGINE_HINT}"
    )


def strategy_of_type() -> dict[str, str | None]:
    """The config file's ``distributed_type`` values -> the strategy each chooses."""
    types = dict(BUILT_IN_TYPES)
    for description in installed().values():
        if description.distributed_type:
            types.setdefault(description.distributed_type, description.name)
    return types


def distributed_types() -> tuple[str, ...]:
    """The ``distributed_type`` values a config file may hold here."""
    return tuple(strategy_of_type())


def load_hook(target: str) -> Callable[..., object]:
    """Import a description's ``"module:attribute"`` hook."""
    return engine_description.load_hook(target)
