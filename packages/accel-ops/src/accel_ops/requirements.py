"""Decorators that refuse to run a function whose optional library is missing.

The check runs at call time, not at decoration time, so a module that decorates its functions
imports fine without the library.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from accel_ops.availability import is_deepspeed_available, is_torchao_available
from accel_ops.enums import DistributedType

_P = ParamSpec("_P")
_R = TypeVar("_R")


def deepspeed_required(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``function`` only when DeepSpeed is installed and is the strategy of this process.

    Raises ``ImportError`` (naming the package and the install line) when DeepSpeed is not
    installed, and ``ValueError`` when a :class:`~accel_ops.PartialState` exists whose
    distributed type is not ``DEEPSPEED`` and the launch did not choose the ``deepspeed``
    strategy.
    """

    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not is_deepspeed_available():
            raise ImportError(
                f"{function.__qualname__} needs DeepSpeed, which is not installed: "
                "pip install 'accel-backends[deepspeed]' (or pip install deepspeed)"
            )
        from accel_ops.state import PartialState

        shared = PartialState._shared_state
        if shared and shared.get("distributed_type") != DistributedType.DEEPSPEED:
            launch = shared.get("launch_environment")
            if launch is None or (launch.strategy or "").lower() != "deepspeed":
                kind = shared.get("distributed_type")
                raise ValueError(
                    f"{function.__qualname__} needs the DeepSpeed strategy, but this process runs "
                    f"{getattr(kind, 'value', kind)}; launch with --use_deepspeed or pass a "
                    "DeepSpeedPlugin to the Accelerator before calling it"
                )
        return function(*args, **kwargs)

    return wrapper


def torchao_required(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``function`` only when torchao 0.6.1 or later is installed, else ``ImportError``."""

    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not is_torchao_available():
            raise ImportError(
                f"{function.__qualname__} needs torchao 0.6.1 or later, which is not installed: "
                "pip install torchao"
            )
        return function(*args, **kwargs)

    return wrapper
