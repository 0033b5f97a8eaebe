"""DeepSpeed's checkpoint part: each engine's own DeepSpeed checkpoint under Accelerate's names,
and the full state dict gathered from the engine (:mod:`accel_backends.deepspeed.checkpoint`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch

from accel_backends.deepspeed import async_capture, checkpoint
from accel_core.strategies.checkpoint_io import CheckpointIO

if TYPE_CHECKING:
    from accel_backends.deepspeed.strategy import DeepSpeedStrategy
    from accel_core.checkpointing import CheckpointReader, CheckpointWriter


class DeepSpeedCheckpointIO(CheckpointIO):
    """State dicts and checkpoints through the strategy's DeepSpeed engines."""

    #: DeepSpeed's save runs on the calling thread with its checkpoint engine capturing the
    #: state dicts; only their writing goes to the background (:mod:`.async_capture`).
    supports_async_save: ClassVar[bool] = True
    strategy: DeepSpeedStrategy

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The full state dict on CPU, on every process (ZeRO-3: on process 0, empty elsewhere;
        it needs ``zero3_save_16bit_model``). Call it on every process."""
        return checkpoint.full_state_dict(self.strategy._engine_of(model), self.strategy._rank)

    def load_model_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        """Load a full state dict into the engine's module (ZeRO-3: process 0's is used) and
        refresh the optimizer's fp32 master weights from it."""
        checkpoint.load_full_state_dict(
            self.strategy._engine_of(model), state_dict, self.strategy._rank
        )

    def checkpoint_model_states(self, models: list[torch.nn.Module]) -> list[dict[str, Any]]:
        """Nothing: each engine's weights are in its DeepSpeed save, taken by
        ``checkpoint_optimizer_states`` (the save pre-hooks get an empty list, as in
        Accelerate)."""
        return []

    def checkpoint_optimizer_states(
        self, optimizers: list[torch.optim.Optimizer]
    ) -> list[dict[str, Any]]:
        """Each engine's DeepSpeed save, taken now without writing its data files (every
        process: DeepSpeed's save is a collective on the default group), for ``save_checkpoint``
        to write: ``{"storages": [...], "capture": ...}`` per engine, whose storages the
        Accelerator copies to CPU for ``async_save`` (see :func:`async_capture.capture`)."""
        return [
            async_capture.capture(engine, checkpoint.engine_tag(index))
            for index, engine in enumerate(self.strategy._engines)
        ]

    def save_checkpoint(
        self,
        writer: CheckpointWriter,
        weights: list[dict[str, Any]],
        optimizer_states: list[dict[str, Any]],
        *,
        safe_serialization: bool = True,
    ) -> None:
        """Every process: each engine's DeepSpeed checkpoint (``pytorch_model/``...) as
        ``checkpoint_optimizer_states`` took it, written where DeepSpeed would have, and
        recorded in the manifest by the processes that wrote its files. No collective (this may
        run in the background saver's thread), except for an engine whose save could not be
        taken: DeepSpeed saves it here, on the calling thread only."""
        async_capture.write(
            writer,
            optimizer_states,
            lambda index: checkpoint.save_engine(
                writer, self.strategy._engines[index], checkpoint.engine_tag(index)
            ),
        )

    def load_checkpoint(
        self,
        reader: CheckpointReader,
        models: list[torch.nn.Module],
        optimizers: list[torch.optim.Optimizer],
        *,
        map_location: str | torch.device = "cpu",
        strict: bool = True,
    ) -> None:
        """Every process: each engine among ``models`` from its DeepSpeed checkpoint (weights,
        optimizer partition, the engine's scheduler and step counters)."""
        for index, engine in enumerate(self.strategy._engines):
            if any(model is engine for model in models):
                checkpoint.load_engine(reader, engine, checkpoint.engine_tag(index), strict=strict)


__all__ = ["DeepSpeedCheckpointIO"]
