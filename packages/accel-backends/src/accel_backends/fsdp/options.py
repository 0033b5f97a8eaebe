"""Reading FSDP options given as text or numbers into torch's enums and policy objects."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, TypeVar

import torch

from accel_ops.constants import FSDP_BACKWARD_PREFETCH, FSDP_SHARDING_STRATEGY

if TYPE_CHECKING:
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy, StateDictType

_E = TypeVar("_E", bound=enum.Enum)

#: ``mixed_precision_policy`` given as text -> the dtype of parameters, reductions and outputs.
MIXED_PRECISION_DTYPES = {
    "fp8": torch.bfloat16,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp32": torch.float32,
}


def sharding_strategy(value: str | int | ShardingStrategy) -> ShardingStrategy:
    """An FSDP 1 sharding strategy from its name (``FULL_SHARD``...), number (1-5) or itself."""
    from torch.distributed.fsdp import ShardingStrategy

    if isinstance(value, ShardingStrategy):
        return value
    return _enum(ShardingStrategy, value, FSDP_SHARDING_STRATEGY, "sharding strategy")


def backward_prefetch(value: str | int | BackwardPrefetch | None) -> BackwardPrefetch | None:
    """A backward prefetch from its name or number; ``NO_PREFETCH`` and ``None`` are none."""
    from torch.distributed.fsdp import BackwardPrefetch

    if value is None or isinstance(value, BackwardPrefetch):
        return value
    if isinstance(value, str) and value.upper() == "NO_PREFETCH":
        return None
    return _enum(BackwardPrefetch, value, FSDP_BACKWARD_PREFETCH[:2], "backward prefetch")


def state_dict_type(value: str | int | StateDictType) -> StateDictType:
    """A state dict type from its name (any case), number (1-3) or itself."""
    from torch.distributed.fsdp import StateDictType

    if isinstance(value, StateDictType):
        return value
    return _enum(StateDictType, value, [m.name for m in StateDictType], "state dict type")


def _enum(enum_type: type[_E], value: str | int, names: list[str], what: str) -> _E:
    text = str(value).strip().upper()
    if text in names:
        return enum_type(names.index(text) + 1)
    try:
        return enum_type(int(text)) if text.isdigit() else enum_type[text]
    except (KeyError, ValueError):
        raise ValueError(
            f"{value!r} is not an FSDP {what}; expected one of {', '.join(names)} (or 1-"
            f"{len(names)})"
        ) from None
