"""FSDP2 (:class:`FSDP2Strategy`): ``fully_shard`` in place on the units the plugin's policy
picks, after a tensor-parallel split over the mesh's ``tp`` dimension when the configuration has
one (:mod:`accel_backends.fsdp.tensor_parallel`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from accel_backends.fsdp.accumulation import FSDP2Accumulation, gradient_sync_off
from accel_backends.fsdp.common import FSDPStrategy
from accel_backends.fsdp.expert_parallel import refuse_unbuilt_expert_parallel
from accel_backends.fsdp.sharding import (
    match_renamed_parameters,
    shard_model,
    upcast_trainable_to_fp32,
)
from accel_backends.fsdp.tensor_parallel import ParallelizeFn, split_model
from accel_core.unwrap import extract_model_from_parallel

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin
    from accel_core.kwargs_handlers import KwargsHandler


class FSDP2Strategy(FSDPStrategy):
    """FSDP2: ``fully_shard`` on the units the plugin's policy picks, in place; ``prepare``
    returns the model itself."""

    fsdp_version: ClassVar[int] = 2

    def __init__(
        self,
        kwargs_handlers: Sequence[KwargsHandler] = (),
        plugin: FullyShardedDataParallelPlugin | None = None,
        **options: Any,
    ) -> None:
        super().__init__(kwargs_handlers, plugin, **options)
        self.accumulation = FSDP2Accumulation(self)

    def _is_set_up(self, module: torch.nn.Module) -> bool:
        from torch.distributed.fsdp import FSDPModule

        inner = extract_model_from_parallel(module)
        return isinstance(inner, FSDPModule) or inner in self._models

    def _shard(
        self,
        model: torch.nn.Module,
        inner: torch.nn.Module,
        before: list[tuple[str, torch.nn.Parameter]],
        *,
        upcast_to_fp32: bool,
    ) -> torch.nn.Module:
        refuse_unbuilt_expert_parallel(self._parallelism_config)
        if self.tp_mesh is not None:
            if self.plugin.cpu_ram_efficient_loading:
                raise ValueError(
                    "cpu_ram_efficient_loading (fsdp_cpu_ram_efficient_loading) can't be used "
                    "with tensor parallelism (tp_size > 1): the model is split before it is "
                    "sharded; turn it off"
                )
            split_over = split_model(inner, self.tp_mesh, self._parallelize_fn())
            if not _same_ranks(split_over, self.tp_mesh):
                raise ValueError(
                    f"the model is split over the processes {split_over.mesh.tolist()}, but "
                    "this process's tp group in accelerator.torch_device_mesh is "
                    f"{self.tp_mesh.mesh.tolist()} (tp is its innermost dimension): split it "
                    "over accelerator.torch_device_mesh['tp'] (TorchTensorParallelConfig("
                    "parallelize_fn=...) is given that mesh)"
                )
        if self.mesh is not None:
            shard_model(inner, self.plugin, self.mesh, self.device, upcast_to_fp32=upcast_to_fp32)
        elif upcast_to_fp32:
            upcast_trainable_to_fp32(inner)
        # Activation checkpointing renames parameters (``_checkpoint_wrapped_module``), which the
        # default name matching of ``setup`` can't follow: match the plain names here.
        self._replaced.update(match_renamed_parameters(before, inner))
        self._models.add(model)
        return model

    def _parallelize_fn(self) -> ParallelizeFn | None:
        """The configuration's ``tp_handler.parallelize_fn`` (read at ``prepare``, so one set on
        ``accelerator.parallelism_config`` after the Accelerator was built counts too)."""
        handler = getattr(self._parallelism_config, "tp_handler", None)
        return getattr(handler, "parallelize_fn", None)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[object]:
        """Backward passes keep unsharded gradients locally instead of reduce-scattering them
        (``set_requires_gradient_sync(False)``); the next synchronising backward reduces the
        sum."""
        return gradient_sync_off(extract_model_from_parallel(model))


def _same_ranks(a: DeviceMesh, b: DeviceMesh) -> bool:
    """Whether two one-dimensional meshes group the same processes (FSDP2 combines a model split
    over either with the data-parallel dimensions; the data follows ``b``'s groups)."""
    return a.mesh.tolist() == b.mesh.tolist()


__all__ = ["FSDP2Strategy"]
