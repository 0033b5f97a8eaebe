"""The checkpoint part of a strategy: its state dicts and its checkpoint calls, as one object.

In the spirit of Lightning Fabric's ``CheckpointIO``: a strategy returns it from
:attr:`Strategy.checkpoint_io <accel_core.strategies.base.Strategy.checkpoint_io>`, and an engine
that saves or loads differently (a shard per rank, an engine's own files) returns a subclass.
Every call below happens on every process, in the order the base module's docstring states
(step 8 and 9); the part decides which process writes which file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch

from accel_core.unwrap import extract_model_from_parallel

if TYPE_CHECKING:
    from accel_core.checkpointing import CheckpointReader, CheckpointWriter
    from accel_core.strategies.base import Strategy


class CheckpointIO:
    """State dicts and checkpoint files of one strategy (default: one whole model per process,
    written by ``writer.is_writer`` processes under Accelerate's file names)."""

    #: Whether ``save_checkpoint`` may run in a background thread on CPU copies of the states.
    supports_async_save: ClassVar[bool] = True

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy

    # -- state dicts (``Accelerator.get_state_dict``, ``save_model``) ----------------------------

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The state dict of the unwrapped model, gathered as this strategy requires."""
        return extract_model_from_parallel(model).state_dict()

    def load_model_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        """Load ``state_dict`` into the (wrapped) model."""
        extract_model_from_parallel(model).load_state_dict(state_dict)

    # -- checkpoints (``Accelerator.save_state`` / ``load_state``) -------------------------------

    def checkpoint_model_states(self, models: list[torch.nn.Module]) -> list[dict[str, Any]]:
        """The state dict of each prepared model, as written into a checkpoint.

        The default is the state dict of the model inside the wrappers (no ``module.`` prefix
        under DDP), which is what Hugging Face Accelerate 1.15 writes and loads, so either
        library reads the other's checkpoints.
        """
        return [
            extract_model_from_parallel(model, keep_torch_compile=False).state_dict()
            for model in models
        ]

    def checkpoint_optimizer_states(
        self, optimizers: list[torch.optim.Optimizer]
    ) -> list[dict[str, Any]]:
        """The state dict of each prepared optimizer, as written into a checkpoint."""
        return [optimizer.state_dict() for optimizer in optimizers]

    def save_checkpoint(
        self,
        writer: CheckpointWriter,
        weights: list[dict[str, Any]],
        optimizer_states: list[dict[str, Any]],
        *,
        safe_serialization: bool = True,
    ) -> None:
        """Write model and optimizer states (default: from ``writer.is_writer`` processes)."""
        from accel_core.checkpointing import names

        if not writer.is_writer:
            return
        for index, state in enumerate(weights):
            name = names.model_file(index, safe_serialization)
            if safe_serialization:
                writer.write_tensors(name, state)
            else:
                writer.write_object(name, state)
        for index, state in enumerate(optimizer_states):
            writer.write_object(names.optimizer_file(index), state)

    def load_checkpoint(
        self,
        reader: CheckpointReader,
        models: list[torch.nn.Module],
        optimizers: list[torch.optim.Optimizer],
        *,
        map_location: str | torch.device = "cpu",
        strict: bool = True,
    ) -> None:
        """Read every model and optimizer state, check it against its object, then load it."""
        from accel_core.checkpointing import model_states

        model_states.load_all(
            reader,
            models,
            optimizers,
            map_location=map_location,
            strict=strict,
            unwrap=extract_model_from_parallel,
        )

    def checkpoint_extra_state(self) -> dict[str, Any]:
        """JSON-serialisable state of the strategy itself, stored in the manifest."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`checkpoint_extra_state` returned."""


__all__ = ["CheckpointIO"]
