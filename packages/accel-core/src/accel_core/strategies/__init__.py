"""Strategies: the interface and the parts an engine returns, the registry of names, the
resolver, and the built-in ones."""

from accel_core.strategies.accumulation_policy import AccumulationPolicy
from accel_core.strategies.base import (
    SetupResult,
    Strategy,
    SupportsCollectives,
    SupportsJoin,
    SupportsNoSync,
    SupportsShardedInit,
)
from accel_core.strategies.checkpoint_io import CheckpointIO
from accel_core.strategies.compat import AccelerateCompat
from accel_core.strategies.parameters import ParameterMap, match_parameters, repoint_optimizer
from accel_core.strategies.registry import (
    ENTRY_POINT_GROUP,
    UnknownStrategyError,
    available_strategies,
    create_strategy,
    describe_strategy,
    register_strategy,
    strategy_descriptions,
)
from accel_core.strategies.resolver import resolve_strategy

__all__ = [
    "ENTRY_POINT_GROUP",
    "AccelerateCompat",
    "AccumulationPolicy",
    "CheckpointIO",
    "ParameterMap",
    "SetupResult",
    "Strategy",
    "SupportsCollectives",
    "SupportsJoin",
    "SupportsNoSync",
    "SupportsShardedInit",
    "UnknownStrategyError",
    "available_strategies",
    "create_strategy",
    "describe_strategy",
    "match_parameters",
    "register_strategy",
    "repoint_optimizer",
    "resolve_strategy",
    "strategy_descriptions",
]
