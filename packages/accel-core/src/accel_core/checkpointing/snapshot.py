"""Everything a checkpoint holds, taken from the live objects at ``save_state`` time.

With ``async_save`` every tensor is copied to CPU (pinned memory on CUDA) so training can go on
changing the originals while a background thread writes the copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accel_core.checkpointing import rng_states
from accel_core.checkpointing.manifest import Manifest, library_versions

if TYPE_CHECKING:
    from accel_core.accelerator import Accelerator


@dataclass
class Snapshot:
    """The states of one checkpoint, and where they go."""

    target: Path
    temporary: Path
    weights: list[dict[str, Any]]
    optimizer_states: list[dict[str, Any]]
    scheduler_states: list[dict[str, Any]]
    scaler_state: dict[str, Any] | None
    custom_states: list[dict[str, Any]]
    loader_states: list[dict[str, Any] | None]
    gradients: list[dict[str, torch.Tensor]]
    rng: dict[str, Any]
    manifest: Manifest
    safe_serialization: bool
    rank: int
    world_size: int
    is_writer: bool
    node: int
    total_limit: int | None = None
    checkpoints_dir: Path | None = None
    removed: list[Path] = field(default_factory=list)


def take(
    accelerator: Accelerator,
    target: Path,
    temporary: Path,
    weights: list[dict[str, Any]],
    safe_serialization: bool,
    copy: bool,
) -> Snapshot:
    """Read every state now; with ``copy`` the tensors are CPU copies owned by the snapshot."""
    strategy = accelerator.strategy
    loaders = accelerator._dataloaders
    rng = rng_states.capture(accelerator.step)
    rng["accel_dataloaders"] = [_loader_position(loader) for loader in loaders]
    state = accelerator.state
    on_each_node = accelerator.project_configuration.save_on_each_node
    snapshot = Snapshot(
        target=target,
        temporary=temporary,
        weights=weights,
        optimizer_states=strategy.checkpoint_optimizer_states(accelerator._optimizers),
        scheduler_states=[scheduler.state_dict() for scheduler in accelerator._schedulers],
        scaler_state=accelerator.scaler.state_dict() if accelerator.scaler is not None else None,
        custom_states=[obj.state_dict() for obj in accelerator._custom_objects],
        loader_states=[
            loader.state_dict() if getattr(loader, "use_stateful_dataloader", False) else None
            for loader in loaders
        ],
        gradients=_accumulated_gradients(accelerator),
        rng=rng,
        manifest=Manifest(
            world_size=state.num_processes,
            step=accelerator.step,
            iteration=accelerator.save_iteration,
            strategy=strategy.name,
            libraries=library_versions(),
            models=[
                {"class": type(accelerator.unwrap_model(m)).__name__} for m in accelerator._models
            ],
            dataloaders=[_loader_summary(loader) for loader in loaders],
            custom_objects=[type(obj).__name__ for obj in accelerator._custom_objects],
            trackers=accelerator._tracking_state(),
            strategy_state=strategy.checkpoint_extra_state(),
        ),
        safe_serialization=safe_serialization,
        rank=state.process_index,
        world_size=state.num_processes,
        is_writer=state.is_local_main_process if on_each_node else state.is_main_process,
        node=state.process_index - state.local_process_index,
    )
    if copy:
        for name in (
            "weights",
            "optimizer_states",
            "scheduler_states",
            "scaler_state",
            "custom_states",
            "loader_states",
            "gradients",
        ):
            setattr(snapshot, name, copy_to_cpu(getattr(snapshot, name)))
    return snapshot


def _accumulated_gradients(accelerator: Accelerator) -> list[dict[str, torch.Tensor]]:
    """Each model's gradients, when the checkpoint falls inside an accumulation cycle."""
    steps = accelerator.gradient_accumulation_steps
    if steps <= 1 or accelerator.step % steps == 0 or accelerator.strategy.handles_accumulation:
        return []
    return [
        {
            name: parameter.grad
            for name, parameter in accelerator.unwrap_model(model).named_parameters()
            if parameter.grad is not None
        }
        for model in accelerator._models
    ]


def _loader_position(loader: Any) -> dict[str, Any]:
    progress = getattr(loader, "progress", None)
    if progress is None:
        return {"epoch": int(getattr(loader, "iteration", 0)), "batches": 0}
    at_end = bool(getattr(loader, "end_of_dataloader", False))
    return progress.state_dict(getattr(loader, "synchronized_generator", None), at_end)


def _loader_summary(loader: Any) -> dict[str, Any]:
    progress = getattr(loader, "progress", None)
    return {
        "class": type(loader).__name__,
        "epoch": int(getattr(loader, "iteration", 0)),
        "batches": progress.batches if progress is not None and progress.in_epoch else 0,
        "batch_size": getattr(loader, "batch_size", None),
        "stateful": bool(getattr(loader, "use_stateful_dataloader", False)),
    }


def copy_to_cpu(value: Any) -> Any:
    """A deep copy of ``value`` whose tensors are detached CPU copies (pinned for CUDA ones)."""
    if isinstance(value, torch.Tensor):
        if value.device.type == "cuda":
            pinned = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            return pinned.copy_(value.detach(), non_blocking=True)
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return type(value)((key, copy_to_cpu(item)) for key, item in value.items())
    if isinstance(value, list):
        return [copy_to_cpu(item) for item in value]
    if isinstance(value, tuple):
        return tuple(copy_to_cpu(item) for item in value)
    return value
