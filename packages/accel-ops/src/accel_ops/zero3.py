"""``GatheredParameters``: the full parameters for a block, from whichever engine partitioned them.

An engine that partitions parameters across ranks provides its own ``GatheredParameters`` context
under the entry-point group ``accel.parameter_gatherers`` (accel-backends provides one for ZeRO-3).
This one enters every installed provider's context, each of which does nothing for parameters it
did not partition; with no provider installed it does nothing, so the same code runs with and
without a partitioning engine. Providers are imported on first use, not with accel-ops.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import entry_points
from typing import Any

import torch

#: The entry-point group: ``name = "package.module:GatheredParameters"``, a context manager
#: taking ``(params, modifier_rank=None, fwd_module=None, enabled=True)``.
GATHERER_GROUP = "accel.parameter_gatherers"


@functools.cache
def _gatherers() -> tuple[Callable[..., contextlib.AbstractContextManager[Any]], ...]:
    """The installed providers' contexts, loaded once, in the order of their names; one that does
    not load is left out with a warning naming it."""
    loaded = []
    for point in sorted(entry_points(group=GATHERER_GROUP), key=lambda point: point.name):
        try:
            loaded.append(point.load())
        except Exception as error:
            warnings.warn(
                f"{GATHERER_GROUP} {point.name!r}: its entry point {point.value!r} does not "
                f"load, left out: {type(error).__name__}: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
    return tuple(loaded)


@contextlib.contextmanager
def GatheredParameters(  # Accelerate's spelling
    params: torch.nn.Parameter | Iterable[torch.nn.Parameter],
    modifier_rank: int | None = None,
    fwd_module: torch.nn.Module | None = None,
    enabled: bool = True,
) -> Iterator[None]:
    """Gather partitioned ``params`` for the block; a no-op when none of them is partitioned.

    Args:
        params: a parameter or an iterable of parameters (e.g. ``model.parameters()``).
        modifier_rank: the rank whose changes are kept and re-partitioned on exit; ``None``
            means the parameters are only read.
        fwd_module: the module to register external parameters with (the engine's argument).
        enabled: ``False`` makes the block a no-op.
    """
    gatherers = _gatherers() if enabled else ()
    if not gatherers:
        yield
        return
    items = [params] if isinstance(params, torch.Tensor) else list(params)
    with contextlib.ExitStack() as stack:
        for gatherer in gatherers:
            stack.enter_context(
                gatherer(items, modifier_rank=modifier_rank, fwd_module=fwd_module, enabled=enabled)
            )
        yield
