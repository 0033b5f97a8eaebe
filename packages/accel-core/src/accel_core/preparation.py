"""What ``Accelerator.prepare`` does with each kind of object.

``prepare`` sorts its arguments into models, optimizers, data loaders and schedulers, hands them
to the strategy's ``setup`` together (which sets up models before optimizers, optimizers before
schedulers) and returns them in the order given. Anything else (``None``, a list, a dict, a
number...) is returned unchanged at its place, as Accelerate does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from accel_core.quantized_placement import check_quantized_placement, is_placed_quantized

if TYPE_CHECKING:
    from accel_core.configuration import TorchDynamoPlugin
    from accel_core.prepare_api import PrepareMixin
    from accel_core.prepared_objects import PreparedObjects

_KINDS = ("model", "optimizer", "data loader", "scheduler")


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
    accelerator: PrepareMixin,
    prepared: PreparedObjects,
    objects: Sequence[Any],
    device_placement: Sequence[bool | None],
    *,
    slice_fn_for_dispatch: Callable[..., Any] | None = None,
) -> list[Any]:
    """Prepare ``objects`` (any order, any number) with one ``Strategy.setup`` call and return
    them in the same order; objects of no known kind come back unchanged.

    Before the strategy: models already prepared are returned as they are, the others get the
    precision's forward wrapper; data loaders are sharded (with the strategy's sampler
    arguments). After it: models are compiled and marked, schedulers the strategy left unwrapped
    are wrapped, and everything is recorded in ``prepared``. The Accelerator is only read.
    """
    from accel_core.optimizer import AcceleratedOptimizer
    from accel_core.parallelism import refuse_unsupported
    from accel_core.scheduler import AcceleratedScheduler

    refuse_unsupported(accelerator.parallelism_config, accelerator.strategy)
    if len(device_placement) != len(objects):
        raise ValueError(
            f"device_placement has {len(device_placement)} entries for {len(objects)} objects; "
            "give one bool (or None) per object passed to prepare()."
        )
    result: list[Any] = list(objects)
    pending: dict[str, list[int]] = {kind: [] for kind in _KINDS}
    placements: dict[int, bool] = {}
    for index, obj in enumerate(objects):
        kind = kind_of(obj)
        placed = (
            accelerator.device_placement
            if device_placement[index] is None
            else bool(device_placement[index])
        )
        if kind == "model" and getattr(obj, "_is_accelerate_prepared", False):
            prepared.add_model(obj)
            continue
        if kind in ("optimizer", "scheduler") and isinstance(
            obj, (AcceleratedOptimizer, AcceleratedScheduler)
        ):
            continue
        if kind == "model":
            if is_placed_quantized(obj):
                check_quantized_placement(obj, accelerator.num_processes)
            if len(dispatched_devices(obj)) > 1:
                placed = False  # accel-bigmodel placed it across devices already
            accelerator.precision.wrap_forward(obj)
        elif kind == "data loader":
            prepared.receive_loader(obj)
            result[index] = shard_loader(accelerator, obj, placed, slice_fn_for_dispatch)
        if kind is not None:
            pending[kind].append(index)
            placements[index] = placed
    set_up = accelerator.strategy.setup(
        [result[i] for i in pending["model"]],
        [result[i] for i in pending["optimizer"]],
        [result[i] for i in pending["scheduler"]],
        [result[i] for i in pending["data loader"]],
        model_placement=[placements[i] for i in pending["model"]],
        optimizer_placement=[placements[i] for i in pending["optimizer"]],
    )
    for index, model in zip(pending["model"], set_up.models, strict=True):
        model = compile_model(model, accelerator.state.dynamo_plugin)
        model._is_accelerate_prepared = True
        prepared.add_model(model)
        result[index] = model
    for index, optimizer in zip(pending["optimizer"], set_up.optimizers, strict=True):
        prepared.add_optimizer(optimizer, lomo=hasattr(objects[index], "fused_backward"))
        result[index] = optimizer
    for index, loader in zip(pending["data loader"], set_up.dataloaders, strict=True):
        prepared.add_dataloader(loader)
        result[index] = loader
    for index, scheduler in zip(pending["scheduler"], set_up.schedulers, strict=True):
        result[index] = _wrap_scheduler(accelerator, prepared, scheduler)
        prepared.add_scheduler(result[index])
    for index in (i for kind in ("optimizer", "scheduler", "data loader") for i in pending[kind]):
        # Accelerate marks every prepared object; libraries read it to avoid preparing twice
        result[index]._is_accelerate_prepared = True
    return result


def _wrap_scheduler(accelerator: PrepareMixin, prepared: PreparedObjects, scheduler: Any) -> Any:
    """``scheduler`` in an ``AcceleratedScheduler`` following the prepared optimizer it
    schedules (all of them when it schedules none of them), unless the strategy wrapped it."""
    from accel_core.scheduler import AcceleratedScheduler

    if isinstance(scheduler, AcceleratedScheduler):
        return scheduler
    inner = getattr(scheduler, "optimizer", None)
    optimizers = [
        opt for opt in prepared.optimizers if getattr(opt, "optimizer", opt) is inner
    ] or prepared.optimizers
    return AcceleratedScheduler(
        scheduler,
        optimizers,
        step_with_optimizer=accelerator.step_scheduler_with_optimizer,
        split_batches=accelerator.split_batches,
        num_processes=accelerator.num_processes,
        gradient_state=accelerator.gradient_state,
    )


def shard_loader(
    accelerator: PrepareMixin,
    data_loader: DataLoader[Any],
    device_placement: bool,
    slice_fn_for_dispatch: Callable[..., Any] | None = None,
) -> DataLoader[Any]:
    """``data_loader`` sharded as the ``DataLoaderConfiguration`` says, into the shards the
    strategy's ``distributed_sampler_kwargs`` name."""
    from accel_core.data_loader import prepare_data_loader

    config = accelerator.dataloader_config
    sampler = accelerator.strategy.distributed_sampler_kwargs
    return prepare_data_loader(
        data_loader,
        accelerator.device,
        num_processes=sampler["num_replicas"],
        process_index=sampler["rank"],
        split_batches=config.split_batches,
        put_on_device=device_placement,
        rng_types=list(accelerator.rng_types),
        dispatch_batches=config.dispatch_batches,
        even_batches=config.even_batches,
        slice_fn_for_dispatch=slice_fn_for_dispatch,
        use_seedable_sampler=config.use_seedable_sampler,
        data_seed=config.data_seed,
        non_blocking=config.non_blocking,
        use_stateful_dataloader=config.use_stateful_dataloader,
    )


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


def dispatched_devices(model: torch.nn.Module) -> set[str]:
    """The devices of a model dispatched by accel-bigmodel (its ``hf_device_map``), else empty."""
    device_map = getattr(model, "hf_device_map", None)
    if not isinstance(device_map, dict):
        return set()
    return {str(device) for device in device_map.values()}
