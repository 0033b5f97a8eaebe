"""Offloading a whole model: ``cpu_offload``, ``disk_offload`` and ``cpu_offload_with_hook``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accel_bigmodel.align_hooks import AlignDevicesHook, attach_align_device_hook
from accel_bigmodel.hooks import ModelHook, add_hook_to_module, remove_hook_from_module
from accel_bigmodel.offload import INDEX_NAME, OffloadedWeightsLoader, offload_state_dict
from accel_bigmodel.storage import check_writable
from accel_ops import send_to_device

DeviceLike = int | str | torch.device


def default_execution_device() -> torch.device:
    """GPU 0 when CUDA is available, else MPS when available, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def execution_device_or_default(execution_device: DeviceLike | None) -> DeviceLike:
    """``execution_device``, or :func:`default_execution_device` when it is None."""
    return execution_device if execution_device is not None else default_execution_device()


def _offload_with_hooks(
    model: nn.Module,
    execution_device: DeviceLike | None,
    weights_map: Mapping[str, torch.Tensor],
    offload_buffers: bool,
    preload_module_classes: list[str] | None,
) -> nn.Module:
    """Hook ``model`` so each module reads its weights from ``weights_map`` just before it runs on
    ``execution_device`` (default: :func:`default_execution_device`); the output comes back on
    the input's device."""
    execution_device = execution_device_or_default(execution_device)
    add_hook_to_module(model, AlignDevicesHook(io_same_device=True), append=True)
    attach_align_device_hook(
        model,
        execution_device=execution_device,
        offload=True,
        offload_buffers=offload_buffers,
        weights_map=weights_map,
        preload_module_classes=preload_module_classes,
    )
    return model


def cpu_offload(
    model: nn.Module,
    execution_device: DeviceLike | None = None,
    offload_buffers: bool = False,
    state_dict: dict[str, torch.Tensor] | None = None,
    preload_module_classes: list[str] | None = None,
) -> nn.Module:
    """Keep one copy of the weights on the CPU and bring each module's in just before it runs.

    ``state_dict`` defaults to the model's weights copied to the CPU. The output comes back on the
    input's device.
    """
    if state_dict is None:
        state_dict = {n: t.detach().to("cpu") for n, t in model.state_dict().items()}
    return _offload_with_hooks(
        model, execution_device, state_dict, offload_buffers, preload_module_classes
    )


def disk_offload(
    model: nn.Module,
    offload_dir: str | os.PathLike,
    execution_device: DeviceLike | None = None,
    offload_buffers: bool = False,
    preload_module_classes: list[str] | None = None,
) -> nn.Module:
    """Keep the weights in ``offload_dir`` and read each module's in just before it runs.

    The weights are written there first unless the folder already has an ``index.json``.
    """
    check_writable(offload_dir)
    if not (Path(offload_dir) / INDEX_NAME).exists():
        offload_state_dict(offload_dir, model.state_dict())
    weights_map = OffloadedWeightsLoader(save_folder=offload_dir)
    return _offload_with_hooks(
        model, execution_device, weights_map, offload_buffers, preload_module_classes
    )


class UserCpuOffloadHook:
    """What ``cpu_offload_with_hook`` returns: the model and its hook, with ``offload()`` and
    ``remove()``."""

    def __init__(self, model: nn.Module, hook: ModelHook) -> None:
        self.model = model
        self.hook = hook

    def offload(self) -> None:
        """Send the model back to the CPU."""
        self.hook.init_hook(self.model)

    def remove(self) -> None:
        """Remove the hook from the model."""
        remove_hook_from_module(self.model)


class CpuOffload(ModelHook):
    """Keeps a model on the CPU until its forward runs, then moves it to ``execution_device``.

    It stays there after the forward; with ``prev_module_hook`` (the ``UserCpuOffloadHook`` of
    the model that ran before in a pipeline) that model is sent back to the CPU first.
    """

    def __init__(
        self,
        execution_device: DeviceLike | None = None,
        prev_module_hook: UserCpuOffloadHook | None = None,
    ) -> None:
        self.prev_module_hook = prev_module_hook
        self.execution_device = execution_device_or_default(execution_device)

    def init_hook(self, module: nn.Module) -> nn.Module:
        return module.to("cpu")

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        if self.prev_module_hook is not None:
            self.prev_module_hook.offload()
        module.to(self.execution_device)
        return send_to_device(args, self.execution_device), send_to_device(
            kwargs, self.execution_device
        )


def cpu_offload_with_hook(
    model: nn.Module,
    execution_device: DeviceLike | None = None,
    prev_module_hook: UserCpuOffloadHook | None = None,
) -> tuple[nn.Module, UserCpuOffloadHook]:
    """Move ``model`` to the execution device when it runs, and back only when asked.

    For pipelines of models run in a loop: pass each model the hook returned for the previous
    one, and it sends that model back to the CPU before moving itself to the execution device.
    Call ``hook.offload()`` on the last one at the end.
    """
    hook = CpuOffload(execution_device=execution_device, prev_module_hook=prev_module_hook)
    add_hook_to_module(model, hook, append=True)
    return model, UserCpuOffloadHook(model, hook)
