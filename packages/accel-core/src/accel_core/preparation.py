"""What ``Accelerator.prepare`` does with each kind of object.

``prepare`` sorts its arguments into models, optimizers, data loaders and schedulers, then
prepares them in that dependency order (models before optimizers, optimizers before schedulers)
and returns them in the order given. Anything else (``None``, a list, a dict, a number...) is
returned unchanged at its place, as Accelerate does.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

if TYPE_CHECKING:
    from accel_core.accelerator import Accelerator
    from accel_core.configuration import TorchDynamoPlugin

_KINDS = ("model", "optimizer", "data loader", "scheduler")
_PASSES = (("model",), ("optimizer", "data loader"), ("scheduler",))


def _is_scheduler(obj: object) -> bool:
    lr_scheduler = torch.optim.lr_scheduler
    base = getattr(lr_scheduler, "LRScheduler", None) or lr_scheduler._LRScheduler
    return isinstance(obj, (base, lr_scheduler.ReduceLROnPlateau))


def kind_of(obj: object) -> str | None:
    """``"model"``, ``"optimizer"``, ``"data loader"`` or ``"scheduler"``; None for anything else
    (``prepare`` passes such objects through)."""
    from accel_core.optimizer import AcceleratedOptimizer
    from accel_core.scheduler import AcceleratedScheduler

    if isinstance(obj, torch.nn.Module):
        return "model"
    if isinstance(obj, (torch.optim.Optimizer, AcceleratedOptimizer)):
        return "optimizer"
    if isinstance(obj, DataLoader):
        return "data loader"
    if _is_scheduler(obj) or isinstance(obj, AcceleratedScheduler):
        return "scheduler"
    return None


def prepare_all(
    accelerator: Accelerator, objects: Sequence[Any], device_placement: Sequence[bool | None]
) -> list[Any]:
    """Prepare ``objects`` (any order, any number) and return them in the same order; objects
    of no known kind come back unchanged."""
    if len(device_placement) != len(objects):
        raise ValueError(
            f"device_placement has {len(device_placement)} entries for {len(objects)} objects; "
            "give one bool (or None) per object passed to prepare()."
        )
    kinds = [kind_of(obj) for obj in objects]
    result: list[Any] = list(objects)
    for kinds_of_pass in _PASSES:
        for index, (obj, kind) in enumerate(zip(objects, kinds, strict=True)):
            if kind in kinds_of_pass:
                result[index] = _prepare_one(accelerator, obj, kind, device_placement[index])
    return result


def _prepare_one(accelerator: Accelerator, obj: Any, kind: str, placement: bool | None) -> Any:
    if kind == "model":
        return accelerator.prepare_model(obj, device_placement=placement)
    if kind == "optimizer":
        return accelerator.prepare_optimizer(obj, device_placement=placement)
    if kind == "data loader":
        return accelerator.prepare_data_loader(obj, device_placement=placement)
    return accelerator.prepare_scheduler(obj)


def compile_model(model: torch.nn.Module, dynamo: TorchDynamoPlugin) -> torch.nn.Module:
    """``model`` compiled as ``dynamo`` says (each repeated block with
    ``use_regional_compilation``), unless its backend is ``"no"`` or it is compiled already."""
    from accel_core.unwrap import is_compiled_module

    if not dynamo.enabled or is_compiled_module(model):
        return model
    if dynamo.use_regional_compilation:
        from accel_core.regional_compilation import compile_regions

        return compile_regions(model, **dynamo.to_kwargs())
    return torch.compile(model, **dynamo.to_kwargs())  # type: ignore[return-value]


def check_not_prepared(
    data_loader: DataLoader, originals: weakref.WeakSet[Any], prepared: list[Any]
) -> None:
    """Refuse a data loader that ``prepare`` already returned or already received."""
    if any(data_loader is loader for loader in prepared):
        raise ValueError(
            f"this {type(data_loader).__name__} was returned by prepare() already; preparing it "
            "again would shard the shards. Pass the original DataLoader once, and use what "
            "prepare() returned."
        )
    if data_loader in originals:
        raise ValueError(
            "this DataLoader was passed to prepare() already; each data loader is prepared once. "
            "Reuse the prepared loader prepare() returned the first time."
        )


def dispatched_devices(model: torch.nn.Module) -> set[str]:
    """The devices of a model dispatched by accel-bigmodel (its ``hf_device_map``), else empty."""
    device_map = getattr(model, "hf_device_map", None)
    if not isinstance(device_map, dict):
        return set()
    return {str(device) for device in device_map.values()}
