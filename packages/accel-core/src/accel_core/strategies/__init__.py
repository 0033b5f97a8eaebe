"""Strategies: the interface, the registry of names, the resolver, and the built-in ones."""

from accel_core.strategies.base import (
    Strategy,
    SupportsJoin,
    SupportsNoSync,
    SupportsShardedInit,
)
from accel_core.strategies.registry import (
    ENTRY_POINT_GROUP,
    UnknownStrategyError,
    available_strategies,
    create_strategy,
    register_strategy,
)
from accel_core.strategies.resolver import resolve_strategy

__all__ = [
    "ENTRY_POINT_GROUP",
    "Strategy",
    "SupportsJoin",
    "SupportsNoSync",
    "SupportsShardedInit",
    "UnknownStrategyError",
    "available_strategies",
    "create_strategy",
    "register_strategy",
    "resolve_strategy",
]
