"""Decorators for your own collectives: Accelerate's ``verify_operation`` and
``chained_operation``.

accel's collectives already run these checks themselves in debug mode; the decorators give a
function of yours (one that takes a tensor structure first, or as ``tensor=``) the same checks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from accel_ops import _comm
from accel_ops.devices import find_device
from accel_ops.errors import DistributedOperationException

_P = ParamSpec("_P")
_R = TypeVar("_R")


def verify_operation(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """In debug mode, check before each call that every rank passes the same shapes and dtypes.

    The data checked is the ``tensor=`` argument, else the first positional one. On one process
    or outside debug mode (``ACCEL_DEBUG_MODE``, ``PartialState(debug=True)``) the function is
    called directly. Raises :class:`~accel_ops.DistributedOperationException` on every rank,
    listing each rank's shapes, when they differ, and on this rank when its tensors are not on
    the process's device.
    """
    operation = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        comm = _comm.resolve()
        if comm is None or not comm.debug:
            return function(*args, **kwargs)
        data = kwargs["tensor"] if "tensor" in kwargs else (args[0] if args else None)
        from accel_ops.state import PartialState

        expected = PartialState._shared_state.get("device")
        found = find_device(data)
        if expected is not None and found is not None and found.type != expected.type:
            raise DistributedOperationException(
                f"{operation} got tensors on {found.type}, but this process runs on "
                f"{expected.type}; move them there first (send_to_device(data, "
                f"PartialState().device))"
            )
        _comm.verify(operation, comm, data)
        return function(*args, **kwargs)

    return wrapper


def chained_operation(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Re-raise a :class:`~accel_ops.DistributedOperationException` from inside ``function`` as a
    new one naming ``function`` (the original is kept as its cause)."""
    operation = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return function(*args, **kwargs)
        except DistributedOperationException as error:
            raise DistributedOperationException(
                f"Error found while calling `{operation}`: {error}"
            ) from error

    return wrapper
