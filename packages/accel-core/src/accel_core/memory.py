"""Fit a training function into memory: retry with a smaller batch size on out-of-memory errors.

``find_executable_batch_size`` behaves as Accelerate 1.15's: after an out-of-memory error the
batch size becomes ``int(batch_size * 0.9)`` (128, 115, 103, 92, ...), unless a
``reduce_batch_size_fn`` says otherwise. One thing is added: with more than one process, the
processes agree after every attempt: if any of them ran out of memory they all retry with the same
smaller size, so no process runs ahead with a size another one could not fit.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import torch

import accel_ops

_R = TypeVar("_R")

# Substrings of the messages torch raises when an allocation fails (CUDA/ROCm/XPU, MPS, CPU, HPU)
# or when cuDNN refuses a configuration that a smaller batch usually avoids: Accelerate 1.15's list.
_OUT_OF_MEMORY_MESSAGES = (
    " out of memory.",
    "MPS backend out of memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "DefaultCPUAllocator: can't allocate memory",
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",
)

#: What the default ``reduce_batch_size_fn`` multiplies the batch size by (rounded down).
REDUCTION_FACTOR = 0.9

_OUT_OF_MEMORY_ERROR = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)

# What each process reports after an attempt; the processes take the largest.
_OK, _OUT_OF_MEMORY, _OTHER_ERROR = 0, 1, 2


def release_memory(*objects: Any) -> list[None]:
    """Drop references to ``objects``, collect garbage and empty the device caches.

    Returns one ``None`` per object; assign it back so the caller's names stop holding the objects::

        model, optimizer = release_memory(model, optimizer)
    """
    released: list[Any] = list(objects)
    for index in range(len(released)):
        released[index] = None
    del objects
    accel_ops.clear_device_cache(garbage_collection=True)
    return released


def should_reduce_batch_size(exception: BaseException) -> bool:
    """Whether ``exception`` is an out-of-memory error that a smaller batch size may avoid.

    As in Accelerate: a ``RuntimeError`` with one argument, a message that contains one of the
    texts torch uses for a failed allocation (CUDA, ROCm, XPU, MPS, CPU, HPU) or for cuDNN's
    ``CUDNN_STATUS_NOT_SUPPORTED``. Also any ``torch.OutOfMemoryError``, whatever its message.
    """
    if isinstance(exception, _OUT_OF_MEMORY_ERROR):
        return True
    if not isinstance(exception, RuntimeError) or len(exception.args) != 1:
        return False
    message = str(exception.args[0])
    return any(text in message for text in _OUT_OF_MEMORY_MESSAGES)


def _process_group_size() -> int:
    """Number of processes collectives reach: the PartialState's, or the default group's."""
    if accel_ops.is_initialized():
        return accel_ops.PartialState().num_processes
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def _all_reduce_max(values: list[int]) -> list[int]:
    """Element-wise maximum of ``values`` over every process (accel_ops.reduce)."""
    if accel_ops.is_initialized():
        device = accel_ops.PartialState().device
    elif torch.distributed.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    tensor = torch.tensor(values, dtype=torch.int64, device=device)
    return [int(v) for v in accel_ops.reduce(tensor, reduction="max").tolist()]


def _check_call(function: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    """Raise a TypeError when the caller passed ``batch_size`` themselves."""
    name = getattr(function, "__name__", repr(function))
    params = list(inspect.signature(function).parameters.values())
    first = params[0].name
    if first in kwargs:
        raise TypeError(
            f"`{name}` was called with {first}={kwargs[first]!r}, but find_executable_batch_size "
            f"passes {first} itself as the first argument. Call it without it."
        )
    takes_varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if not takes_varargs and len(args) + 1 > len(positional):
        shown = ", ".join(repr(a) for a in args[1:])
        raise TypeError(
            f"`{name}` got {len(args)} positional argument(s) but takes {len(positional) - 1} "
            f"besides {first}: the batch size looks passed in as the first argument. "
            f"find_executable_batch_size passes it itself; call `{name}({shown})` instead."
        )


def find_executable_batch_size(
    function: Callable[..., _R] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[], int] | None = None,
) -> Any:
    """Decorate ``function(batch_size, ...)`` so it is retried with a smaller batch size on OOM.

    The decorated function is called without its first argument; the decorator supplies it,
    starting at ``starting_batch_size``. When the call raises an out-of-memory error (see
    :func:`should_reduce_batch_size`), the device caches are emptied and the call is repeated
    with ``reduce_batch_size_fn()`` (a function of no arguments returning the next size; by
    default ``int(batch_size * 0.9)``: 128, 115, 103, 92, ...). Reaching 0 raises
    ``RuntimeError("No executable batch size found, reached zero.")``. Any other exception
    propagates unchanged. A later call of the same decorated function starts from the last size
    tried.

    With a default process group of more than one process, every process reports after each
    attempt whether it succeeded, ran out of memory or failed otherwise (one ``all_reduce``):

    - all succeeded: each returns its result;
    - any ran out of memory: all call ``reduce_batch_size_fn`` and retry with the smallest size
      any of them proposes, so the sizes tried are the same on every process;
    - any failed otherwise: that process re-raises its error; the others raise a RuntimeError
      that points to it instead of waiting forever.

    An out-of-memory error that strikes one process in the middle of a collective of its own
    (a DDP backward, say) can still leave the others blocked in that collective until the
    process-group timeout; the agreement covers errors raised outside the function's collectives.

    Example::

        @find_executable_batch_size(starting_batch_size=128)
        def train(batch_size, model, optimizer):
            ...

        train(model, optimizer)
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    if isinstance(starting_batch_size, bool) or not isinstance(starting_batch_size, int):
        raise TypeError(
            f"starting_batch_size must be an int, got {starting_batch_size!r} "
            f"({type(starting_batch_size).__name__})"
        )
    params = inspect.signature(function).parameters
    if not params:
        name = getattr(function, "__name__", repr(function))
        raise TypeError(
            f"`{name}` takes no arguments; find_executable_batch_size passes the batch size as the "
            f"first argument, so define it as `def {name}(batch_size, ...)`."
        )

    batch_size = starting_batch_size

    def ninety_percent() -> int:
        return int(batch_size * REDUCTION_FACTOR)

    next_size = reduce_batch_size_fn or ninety_percent

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> _R:
        nonlocal batch_size
        _check_call(function, args, kwargs)
        accel_ops.clear_device_cache(garbage_collection=True)
        while True:
            if batch_size <= 0:
                raise RuntimeError("No executable batch size found, reached zero.")
            error: BaseException | None = None
            try:
                result = function(batch_size, *args, **kwargs)
                status = _OK
            except Exception as exc:
                # The OOM exception is not kept: its traceback holds the attempt's tensors.
                status, error = (
                    (_OUT_OF_MEMORY, None) if should_reduce_batch_size(exc) else (_OTHER_ERROR, exc)
                )
            distributed = _process_group_size() > 1
            if distributed:
                agreed = _all_reduce_max([status])[0]
                if agreed == _OTHER_ERROR and status != _OTHER_ERROR:
                    raise RuntimeError(
                        f"find_executable_batch_size: another process failed at batch_size="
                        f"{batch_size} with an error that is not out-of-memory; see its output."
                    )
                status = agreed
            if status == _OK:
                return result
            if error is not None:
                raise error
            accel_ops.clear_device_cache(garbage_collection=True)
            proposed = int(next_size())
            batch_size = -_all_reduce_max([-proposed])[0] if distributed else proposed

    return wrapper
