"""``GatheredParameters``: read or change parameters that DeepSpeed ZeRO-3 partitioned.

ZeRO-3 keeps only a shard of each parameter on each rank (the attribute ``ds_id`` marks such a
parameter). Inside ``GatheredParameters(params)`` the full parameters are gathered on every rank,
and with ``modifier_rank=r`` the changes rank ``r`` makes are partitioned back on exit. Where
nothing is partitioned (no DeepSpeed installed, or plain parameters) it does nothing, so the same
code runs with and without ZeRO-3.

``accel_ops.GatheredParameters`` (Accelerate's ``accelerate.utils.operations.GatheredParameters``)
reaches this one through the entry-point group ``accel.parameter_gatherers``; deepspeed itself is
imported only when a partitioned parameter is gathered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch

from accel_ops.availability import is_deepspeed_available


def _is_partitioned(parameter: object) -> bool:
    return isinstance(parameter, torch.Tensor) and hasattr(parameter, "ds_id")


@contextlib.contextmanager
def GatheredParameters(  # Accelerate's (and DeepSpeed's) spelling
    params: torch.nn.Parameter | Iterable[torch.nn.Parameter],
    modifier_rank: int | None = None,
    fwd_module: torch.nn.Module | None = None,
    enabled: bool = True,
) -> Iterator[None]:
    """Gather ZeRO-3 partitioned ``params`` for the block (DeepSpeed's
    ``deepspeed.zero.GatheredParameters``); a no-op when none of them is partitioned.

    Args:
        params: a parameter or an iterable of parameters (e.g. ``model.parameters()``).
        modifier_rank: the rank whose changes are kept and re-partitioned on exit; ``None``
            means the parameters are only read.
        fwd_module: the module to register external parameters with (DeepSpeed's argument).
        enabled: ``False`` makes the block a no-op.
    """
    items = [params] if isinstance(params, torch.Tensor) else list(params)
    if not enabled or not is_deepspeed_available() or not any(map(_is_partitioned, items)):
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(
        items, modifier_rank=modifier_rank, fwd_module=fwd_module, enabled=enabled
    ):
        yield
