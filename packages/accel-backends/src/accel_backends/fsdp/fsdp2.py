"""FSDP2 (:class:`FSDP2Strategy`): ``fully_shard`` in place on the units the plugin's policy
picks, after a tensor-parallel split over the mesh's ``tp`` dimension when the configuration has
one (:mod:`accel_backends.tensor_parallel`), or after the model is cut to this process's
pipeline stage when it has a ``pp`` dimension (:mod:`accel_backends.fsdp.pipelining`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from accel_backends.fsdp.accumulation import FSDP2Accumulation, gradient_sync_off
from accel_backends.fsdp.common import FSDPStrategy
from accel_backends.fsdp.expert_parallel import (
    expert_modules,
    expert_parallel_size,
    refuse_unsupported_expert_parallel,
    shard_experts,
)
from accel_backends.fsdp.pipelining.checkpoint_io import PipelineCheckpointIO
from accel_backends.fsdp.pipelining.clipping import clip_grad_norm_over_stages
from accel_backends.fsdp.pipelining.refusals import refuse_unsupported_pipeline
from accel_backends.fsdp.pipelining.schedule_step import PipelineStep
from accel_backends.fsdp.sharding import (
    match_renamed_parameters,
    shard_model,
    upcast_trainable_to_fp32,
)
from accel_backends.pipeline_config import PipelineParallelConfig
from accel_backends.tensor_parallel import ParallelizeFn, split_model
from accel_core.unwrap import extract_model_from_parallel

if TYPE_CHECKING:
    from collections.abc import Iterable

    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.distributed.device_mesh import DeviceMesh

    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin
    from accel_core.kwargs_handlers import KwargsHandler
    from accel_core.strategies.parameters import ParameterMap
    from accel_core.strategies.step import LossFunction


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
        self.checkpoint_io = PipelineCheckpointIO(self)
        #: Set while a checkpoint whose optimizer state was written flattened (by pipeline
        #: stages) loads, so that it is read so here too.
        self._flat_optimizer_checkpoint = False
        #: This process's pipeline stage and its schedule (None without a ``pp`` dimension).
        self.pipeline: PipelineStep | None = None

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
        if self.pp_mesh is not None:
            refuse_unsupported_pipeline(self)
            inner = self._pipeline_step().keep_stage(inner, self.precision.wrap_forward)
        # expert parallelism: every check before the first change
        if expert_parallel_size(self._parallelism_config) > 1:
            refuse_unsupported_expert_parallel(self._parallelism_config, self.plugin)
        experts = expert_modules(inner, self._parallelism_config)
        if self.tp_mesh is not None:
            if self.plugin.cpu_ram_efficient_loading:
                raise ValueError(
                    "cpu_ram_efficient_loading (fsdp_cpu_ram_efficient_loading) can't be used "
                    "with tensor parallelism (tp_size > 1): the model is split before it is "
                    "sharded; turn it off"
                )
            split_over = split_model(
                inner, self.tp_mesh, self._parallelize_fn(), leave=[m for _, m in experts]
            )
            if not _same_ranks(split_over, self.tp_mesh):
                raise ValueError(
                    f"the model is split over the processes {split_over.mesh.tolist()}, but "
                    "this process's tp group in accelerator.torch_device_mesh is "
                    f"{self.tp_mesh.mesh.tolist()} (tp is its innermost dimension): split it "
                    "over accelerator.torch_device_mesh['tp'] (TorchTensorParallelConfig("
                    "parallelize_fn=...) is given that mesh)"
                )
        if experts:
            assert self._config_mesh is not None
            if upcast_to_fp32:  # before the experts become units of their own
                upcast_trainable_to_fp32(inner)
                upcast_to_fp32 = False
            shard_experts(experts, self._config_mesh, self.plugin)
        if self.mesh is not None:
            shard_model(inner, self.plugin, self.mesh, self.device, upcast_to_fp32=upcast_to_fp32)
        elif upcast_to_fp32:
            upcast_trainable_to_fp32(inner)
        # Activation checkpointing renames parameters (``_checkpoint_wrapped_module``), which the
        # default name matching of ``setup`` can't follow: match the plain names here.
        self._replaced.update(match_renamed_parameters(before, inner))
        self._models.add(model)
        return model

    def _pipeline_step(self) -> PipelineStep:
        if self.pipeline is None:
            assert self.pp_mesh is not None
            handler = getattr(self._parallelism_config, "pp_handler", None)
            self.pipeline = PipelineStep(
                self.pp_mesh, handler or PipelineParallelConfig(), self.device
            )
        return self.pipeline

    def setup_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        parameter_map: ParameterMap,
        *,
        device_placement: bool,
    ) -> torch.optim.Optimizer:
        """As FSDP's; under pipeline parallelism the optimizer keeps only this stage's
        parameters (it was built on the whole model's)."""
        if self.pipeline is not None and self.pipeline.model is not None:
            kept = {id(p) for p in self.pipeline.model.parameters()}
            replaced = {**parameter_map, **self._replaced}
            kept |= {key for key, (_, new) in replaced.items() if id(new()) in kept}
            for group in optimizer.param_groups:
                group["params"] = [p for p in group["params"] if id(p) in kept]
        return super().setup_optimizer(optimizer, parameter_map, device_placement=device_placement)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Refused under pipeline parallelism: no process holds the whole model's forward."""
        if self.pp_mesh is not None:
            raise RuntimeError(
                "accelerator.backward can't run under pipeline parallelism (pp_size="
                f"{self.pp_mesh.size()}): each process holds one stage, and the schedule runs "
                "forward and backward together. Replace `loss = loss_fn(model(inputs), target); "
                "accelerator.backward(loss)` by `loss = accelerator.forward_backward(model, "
                "inputs, loss_fn, target)`, which runs under every strategy"
            )
        super().backward(loss, **kwargs)

    def forward_backward(
        self,
        model: torch.nn.Module,
        inputs: object,
        loss_fn: LossFunction,
        target: object = None,
    ) -> torch.Tensor:
        """Under pipeline parallelism, the schedule (:mod:`accel_backends.fsdp.pipelining.
        schedule_step`); otherwise forward + backward."""
        if self.pp_mesh is None:
            return super().forward_backward(model, inputs, loss_fn, target)
        from accel_core.gradient_state import GradientState

        pipeline = self._pipeline_step()
        inner = extract_model_from_parallel(model)
        return pipeline.run(inner, inputs, loss_fn, target, GradientState().num_steps)

    def clip_gradients_norm(
        self,
        module: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        parameters: Iterable[torch.nn.Parameter] | None = None,
    ) -> torch.Tensor:
        """As FSDP's; under pipeline parallelism the norm is the whole model's, over every
        stage (:mod:`accel_backends.fsdp.pipelining.clipping`)."""
        if self.pp_mesh is None:
            return super().clip_gradients_norm(
                module, optimizer, max_norm, norm_type, parameters=parameters
            )
        if parameters is None:
            if module is None:
                raise ValueError("clip_gradients_norm needs a module or parameters")
            parameters = module.parameters()
        return clip_grad_norm_over_stages(
            parameters, max_norm, norm_type, self.pp_mesh.get_group(), self.device
        )

    def _options(
        self, *, full: bool, cpu_offload: bool = False, strict: bool = True
    ) -> StateDictOptions:
        """FSDP's; under pipeline parallelism the optimizer's state is flattened (keyed by
        parameter name, group settings included: the stages' groups differ)."""
        options = super()._options(full=full, cpu_offload=cpu_offload, strict=strict)
        if self.pp_mesh is not None or self._flat_optimizer_checkpoint:
            options.flatten_optimizer_state_dict = True
        return options

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
