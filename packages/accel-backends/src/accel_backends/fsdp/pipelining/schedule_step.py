"""``accelerator.forward_backward`` under pipeline parallelism: one batch through a
``torch.distributed.pipelining`` schedule.

Every process of one pipeline (the ``pp`` group) is given the same batch: the data loaders shard
only over the data-parallel dimensions. The first stage splits ``inputs`` into micro-batches
along their first dimension and runs them through its layers; activations go to the next stage
and their gradients come back, in the schedule's order (GPipe: every forward, then every
backward; 1F1B: after a warm-up, one forward then one backward). The last stage splits
``target`` the same way and applies ``loss_fn`` to each micro-batch's outputs and target; each
micro-batch's loss is backpropagated divided by the number of micro-batches and the
accumulation steps (torch's own division of the gradients after the step is off, since it
would also divide the gradients accumulated before this batch). The batch's loss, the mean of
the micro-batches' losses (the batch's mean loss when ``loss_fn`` averages and the micro-batches
are equal, up to rounding), is broadcast from the last stage over the ``pp`` group, so every
stage returns it (as float64: the other stages can't know the last stage's dtype).

A schedule is built for each shape of batch (torch infers the shapes sent between stages on
the first step), so a smaller last batch works, as long as it splits into the micro-batches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from accel_backends.fsdp.pipelining.stages import StageForward, keep_stage, split_causal_lm
from accel_core.strategies.step import LossFunction

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle

    from accel_backends.pipeline_config import PipelineParallelConfig


def _tensors(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


class PipelineStep:
    """This process's stage of the pipeline over ``pp_mesh`` and the schedule that runs it."""

    def __init__(
        self, pp_mesh: DeviceMesh, handler: PipelineParallelConfig, device: torch.device
    ) -> None:
        self.mesh = pp_mesh
        self.handler = handler
        self.device = device
        self.stage_index = pp_mesh.get_local_rank()
        self.num_stages = pp_mesh.size()
        self.microbatches = handler.microbatches or self.num_stages
        self.model: torch.nn.Module | None = None
        self._forward: StageForward | None = None
        self._schedules: dict[tuple[tuple[int, ...], ...], PipelineScheduleSingle] = {}
        self._loss_fn: LossFunction | None = None

    @property
    def is_first(self) -> bool:
        """Whether this process holds the first stage (it reads the inputs)."""
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        """Whether this process holds the last stage (it computes the loss)."""
        return self.stage_index == self.num_stages - 1

    def keep_stage(
        self, model: torch.nn.Module, wrap_forward: Callable[[torch.nn.Module], None]
    ) -> torch.nn.Module:
        """Prune ``model`` in place to this process's stage (:func:`~accel_backends.fsdp.
        pipelining.stages.keep_stage`); one model per pipeline. A forward the precision had
        wrapped in autocast (``_original_forward``, mixed precision) is wrapped again around
        the stage's, with ``wrap_forward``."""
        if self.model is not None:
            raise ValueError(
                "pipeline parallelism runs one model: prepare the model being trained once, "
                "and evaluate other models outside the pipeline"
            )
        split_fn = self.handler.split_fn or split_causal_lm
        autocast = "_original_forward" in model.__dict__
        stage = keep_stage(model, split_fn, self.stage_index, self.num_stages)
        self._forward = stage.forward  # type: ignore[assignment]
        if autocast:
            model.__dict__.pop("_original_forward")
            wrap_forward(stage)
        self.model = stage
        return stage

    def run(
        self,
        model: torch.nn.Module,
        inputs: object,
        loss_fn: LossFunction,
        target: object,
        accumulation_steps: int,
    ) -> torch.Tensor:
        """One batch through the schedule; returns the batch's loss (detached, float64) on every
        stage. Raises ``ValueError``, before anything runs, for another model than the prepared
        one, inputs without a tensor, or a batch that does not split into the micro-batches."""
        import torch.distributed as dist

        if model is not self.model:
            raise ValueError(
                "under pipeline parallelism forward_backward runs the prepared model (this "
                "process holds one stage of it), not another module"
            )
        tensors = _tensors(inputs)
        if not tensors:
            raise ValueError("forward_backward got inputs without a tensor to split")
        batch = tensors[0].shape[0]
        if batch % self.microbatches:
            raise ValueError(
                f"a batch of {batch} samples does not split into {self.microbatches} "
                "micro-batches: make the batch size a multiple of PipelineParallelConfig("
                "microbatches=...) (drop_last=True keeps the last batch whole)"
            )
        key = tuple(tuple(t.shape) for t in (*tensors, *_tensors(target)))
        schedule = self._schedules.get(key)
        if schedule is None:
            schedule = self._schedules[key] = self._new_schedule()
        losses: list[torch.Tensor] = []
        scale = self.microbatches * accumulation_steps

        def micro_loss(outputs: object, micro_target: object) -> torch.Tensor:
            loss = loss_fn(outputs, micro_target)
            losses.append(loss.detach())
            return loss / scale

        self._loss_fn = micro_loss
        assert self._forward is not None
        self._forward.running = True
        args: tuple[object, ...] = ()
        kwargs: dict[str, object] = {}
        if self.is_first:
            if isinstance(inputs, Mapping):
                kwargs = dict(inputs)
            elif isinstance(inputs, tuple):
                args = inputs
            else:
                args = (inputs,)
        try:
            schedule.step(
                *args, target=target if self.is_last else None, return_outputs=False, **kwargs
            )
        finally:
            self._loss_fn = None
            self._forward.running = False
        if self.is_last:
            # the micro-batches' losses are the last ones: on a new schedule's first step torch
            # also runs the loss once on the first micro-batch, to learn the shapes
            micro = losses[-self.microbatches :]
            loss = torch.stack(micro).to(torch.float64).mean().to(self.device)
        else:
            loss = torch.zeros((), dtype=torch.float64, device=self.device)
        dist.broadcast(loss, group=self.mesh.get_group(), group_src=self.num_stages - 1)
        return loss

    def _loss(self, outputs: object, target: object) -> torch.Tensor:
        assert self._loss_fn is not None, "the schedule computes losses only inside run()"
        return self._loss_fn(outputs, target)

    def _new_schedule(self) -> PipelineScheduleSingle:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        assert self.model is not None
        stage = PipelineStage(
            self.model,
            self.stage_index,
            self.num_stages,
            self.device,
            group=self.mesh.get_group(),
        )
        kind = Schedule1F1B if self.handler.schedule == "1F1B" else ScheduleGPipe
        return kind(stage, self.microbatches, loss_fn=self._loss, scale_grads=False)
