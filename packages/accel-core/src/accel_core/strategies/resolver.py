"""Choosing the strategy: an explicit argument, else the launch environment, else the world size.

The Accelerator calls :func:`resolve_strategy` once and then only uses what it returns.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from accel_core.built_in_engines import ENGINE_HINT
from accel_core.strategies.base import Strategy
from accel_core.strategies.registry import (
    UnknownStrategyError,
    available_strategies,
    create_strategy,
    strategy_descriptions,
)

if TYPE_CHECKING:
    from accel_core.kwargs_handlers import KwargsHandler


def sharding_strategy_name() -> str:
    """The strategy a ``ParallelismConfig`` with ``dp_shard_size > 1`` chooses when neither the
    code nor the launch names one: the installed engine whose description says
    ``shards_by_default`` (FSDP2 of accel-backends). Raises :class:`UnknownStrategyError` saying
    what to install when no installed engine does."""
    for description in strategy_descriptions().values():
        if description.shards_by_default:
            return description.name
    known = ", ".join(repr(n) for n in available_strategies())
    raise UnknownStrategyError(
        "the ParallelismConfig shards the model, and no installed strategy shards by default "
        f"(installed strategies: {known}). {ENGINE_HINT}"
    )


def mesh_strategy_name(needed: frozenset[str]) -> str | None:
    """The installed engine that trains over every dimension in ``needed`` (those a
    ``ParallelismConfig`` sets above 1 beyond ``dp_replicate``), the ``shards_by_default`` one
    first; None when no installed engine lists them all."""
    candidates = sorted(
        strategy_descriptions().values(), key=lambda d: (not d.shards_by_default, d.name)
    )
    for description in candidates:
        if needed <= description.mesh_dimensions:
            return description.name
    return None


def default_strategy_name(
    world_size: int, *, sharded: bool = False, needed: frozenset[str] = frozenset()
) -> str:
    """For dimensions above 1 (``needed``, e.g. ``dp_shard``, ``tp``), the installed engine that
    lists them all (:func:`mesh_strategy_name`); else, when the parallelism configuration shards
    the model (``sharded``, or a dimension among ``needed`` whose strategy builds the mesh,
    ``MeshDimension.strategy_builds_mesh``: ``dp_shard``), :func:`sharding_strategy_name`; else
    ``ddp`` when the job has more than one process, else ``single_device`` (whose ``prepare``
    then refuses what it does not run)."""
    chosen = mesh_strategy_name(needed) if needed else None
    if chosen is not None:
        return chosen
    if sharded or _builds_mesh(needed):
        return sharding_strategy_name()
    return "ddp" if world_size > 1 else "single_device"


def _builds_mesh(needed: frozenset[str]) -> bool:
    """Whether a dimension of ``needed`` is one only the strategy that runs it can build."""
    if not needed:
        return False
    from accel_core.parallelism import known_dimensions

    known = known_dimensions()
    return any(known[name].strategy_builds_mesh for name in needed if name in known)


def resolve_strategy(
    strategy: str | Strategy | None,
    *,
    launch_strategy: str | None,
    launch_options: Mapping[str, object] | None,
    world_size: int,
    kwargs_handlers: Sequence[KwargsHandler] = (),
    plugins: Mapping[str, object | None] | None = None,
    sharded: bool = False,
    needed: frozenset[str] = frozenset(),
) -> Strategy:
    """The strategy to use, created but not yet set up.

    Precedence: ``strategy`` (an instance is used as is; a name is created with no options), then
    an Accelerate-style plugin object (``plugins``, e.g. ``{"deepspeed": DeepSpeedPlugin(...)}``,
    given as the ``plugin`` option), then ``ACCEL_STRATEGY`` with ``ACCEL_STRATEGY_CONFIG`` as
    options (but a launch's ``ddp`` gives way to the installed strategy that trains over
    ``needed``, when ddp does not), then :func:`default_strategy_name` (``needed``: the
    parallelism configuration's dimensions above 1 beyond ``dp_replicate``; ``sharded``, the
    older spelling of ``dp_shard`` among them).
    """
    if isinstance(strategy, Strategy):
        return strategy
    if strategy is not None:
        return create_strategy(str(strategy), kwargs_handlers=kwargs_handlers)
    for name, plugin in (plugins or {}).items():
        if plugin is not None:
            chosen = create_strategy(name, kwargs_handlers=kwargs_handlers, plugin=plugin)
            if chosen.compat.plugin is None:
                chosen.compat.plugin = plugin
            return chosen
    if launch_strategy == "ddp" and needed and not launch_options:
        # a multi-process launch (ddp, by process count or --multi_gpu) of a script whose
        # ParallelismConfig asks for dimensions ddp does not train over: the installed strategy
        # that does (transformers' Trainer builds ParallelismConfig(tp_size=...) for a model
        # split while loading; Accelerate runs it under its multi-GPU launch)
        chosen = mesh_strategy_name(needed)
        if chosen is not None:
            return create_strategy(chosen, kwargs_handlers=kwargs_handlers)
    if launch_strategy == "ddp" and world_size == 1 and "TORCHELASTIC_RESTART_COUNT" in os.environ:
        # an elastic job (--num_machines MIN:MAX) that goes on with one process left: the
        # launch chose ddp for more processes
        launch_strategy = None
    if launch_strategy:
        return create_strategy(
            launch_strategy, kwargs_handlers=kwargs_handlers, **dict(launch_options or {})
        )
    name = default_strategy_name(world_size, sharded=sharded, needed=needed)
    return create_strategy(name, kwargs_handlers=kwargs_handlers)
