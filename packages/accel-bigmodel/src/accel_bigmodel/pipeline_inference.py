"""Pipeline-parallel inference (Accelerate's ``accelerate.inference``): out of scope in accel.

Accelerate splits a model into stages with ``torch.distributed.pipelining`` (formerly PiPPy) and
runs one stage per process. accel does not: every function here raises :class:`OutOfScopeError`.
To spread a model over several GPUs in one process, use ``dispatch_model`` or
``load_checkpoint_and_dispatch`` with ``device_map="auto"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from accel_ops.out_of_scope import OutOfScopeError, out_of_scope

_FEATURE = "pipeline-parallel inference (Accelerate's prepare_pippy, torch.distributed.pipelining)"
_INSTEAD = (
    "to spread a model over several GPUs in one process, use dispatch_model(model, device_map) or "
    'load_checkpoint_and_dispatch(model, checkpoint, device_map="auto")'
)


def _refuse(function: str) -> OutOfScopeError:
    return out_of_scope(f"{function}: {_FEATURE}", _INSTEAD)


def generate_device_map(
    model: nn.Module,
    num_processes: int = 1,
    no_split_module_classes: list[str] | None = None,
    max_memory: dict[int | str, int | str] | None = None,
) -> dict[str, int | str]:
    """Accelerate's device map for pipeline stages. Raises :class:`OutOfScopeError`; for a map
    over the GPUs of one process use ``infer_auto_device_map``."""
    raise _refuse("generate_device_map")


def find_pippy_batch_size(args: tuple[Any, ...] | None, kwargs: dict[str, Any] | None) -> int:
    """Accelerate's batch-size probe for pipeline inputs. Raises :class:`OutOfScopeError`."""
    raise _refuse("find_pippy_batch_size")


def build_pipeline(
    model: nn.Module,
    split_points: list[str],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    num_chunks: int,
) -> object:
    """Accelerate's pipeline-stage builder. Raises :class:`OutOfScopeError`."""
    raise _refuse("build_pipeline")


def pippy_forward(
    forward: Callable[..., Any], num_chunks: int, gather_output: bool, *args: Any, **kwargs: Any
) -> Any:
    """Accelerate's forward through pipeline stages. Raises :class:`OutOfScopeError`."""
    raise _refuse("pippy_forward")


def prepare_pippy(
    model: nn.Module,
    split_points: str | list[str] | None = "auto",
    no_split_module_classes: list[str] | None = None,
    example_args: tuple[Any, ...] | None = (),
    example_kwargs: dict[str, Any] | None = None,
    num_chunks: int | None = None,
    gather_output: bool | None = False,
) -> nn.Module:
    """Accelerate's wrapper for pipeline-parallel inference. Raises :class:`OutOfScopeError`;
    use ``dispatch_model`` or ``load_checkpoint_and_dispatch(..., device_map="auto")``."""
    raise _refuse("prepare_pippy")
