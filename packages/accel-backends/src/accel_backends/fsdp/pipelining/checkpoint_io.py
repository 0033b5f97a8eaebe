"""Checkpoints and state dicts of a model split into pipeline stages.

Each stage holds its parameters under the whole model's names
(:mod:`accel_backends.fsdp.pipelining.stages`), so a sharded checkpoint (``save_state``, DCP) is
every stage's shards written into one folder: it loads on another number of stages, or as one
process, as any DCP checkpoint does. The optimizer's state is written flattened (one entry per
parameter name, its parameter group's settings included), since the stages' parameter groups
hold different parameters. A full state dict (``get_state_dict``, ``save_model``) is gathered
over the data-parallel processes of each stage, then over the ``pp`` group, so that every
process has the whole model's; loading one gives each stage its own entries.
``FULL_STATE_DICT`` checkpoints (process 0 writes every file) are refused: process 0 holds one
stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accel_backends.fsdp.checkpoint_io import FSDPCheckpointIO

if TYPE_CHECKING:
    import torch

    from accel_core.checkpointing import CheckpointReader, CheckpointWriter


class PipelineCheckpointIO(FSDPCheckpointIO):
    """FSDP's checkpoint part, with the whole model's state dict gathered over the stages when
    the strategy has a ``pp`` mesh (as FSDP's otherwise)."""

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The whole model's full state dict on every process (each stage's, gathered)."""
        own = super().model_state_dict(model)
        mesh = self.strategy.pp_mesh
        if mesh is None:
            return own
        import torch.distributed as dist

        stages: list[dict[str, Any] | None] = [None] * mesh.size()
        dist.all_gather_object(stages, own, group=mesh.get_group())
        whole: dict[str, Any] = {}
        for stage in stages:
            whole.update(stage or {})
        return whole

    def load_model_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        """Load the entries of a whole model's full state dict that this stage holds."""
        if self.strategy.pp_mesh is not None:
            names = set(self.strategy._state_module(model).state_dict())
            state_dict = {k: v for k, v in state_dict.items() if k in names}
        super().load_model_state_dict(model, state_dict)

    def checkpoint_model_states(self, models: list[torch.nn.Module]) -> list[dict[str, Any]]:
        """As FSDP's; ``FULL_STATE_DICT`` is refused under pipeline parallelism."""
        self._refuse_full()
        return super().checkpoint_model_states(models)

    def save_checkpoint(
        self,
        writer: CheckpointWriter,
        weights: list[dict[str, Any]],
        optimizer_states: list[dict[str, Any]],
        *,
        safe_serialization: bool = True,
    ) -> None:
        """As FSDP's (every stage's shards into one DCP folder)."""
        self._refuse_full()
        super().save_checkpoint(
            writer, weights, optimizer_states, safe_serialization=safe_serialization
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
        """As FSDP's: each stage reads its own entries. An optimizer state written flattened
        (by stages) is read flattened on any mesh, with or without stages."""
        self.strategy._flat_optimizer_checkpoint = _flat_optimizer(reader)
        try:
            super().load_checkpoint(
                reader, models, optimizers, map_location=map_location, strict=strict
            )
        finally:
            self.strategy._flat_optimizer_checkpoint = False

    def _refuse_full(self) -> None:
        mesh = self.strategy.pp_mesh
        if mesh is not None and self._full_checkpoints:
            raise ValueError(
                f"state_dict_type FULL_STATE_DICT can't save a checkpoint under pipeline "
                f"parallelism (pp_size={mesh.size()}): process 0 holds one stage; use "
                "SHARDED_STATE_DICT (the default), whose checkpoint loads as one process too"
            )


def _flat_optimizer(reader: CheckpointReader) -> bool:
    """Whether the checkpoint's first optimizer was written flattened (its parameter groups
    stored per parameter name, no ``param_groups.0.params`` list)."""
    from accel_backends.fsdp import dcp

    folder = dcp.optimizer_folder(0)
    if not reader.exists(f"{folder}/.metadata"):
        return False
    from torch.distributed.checkpoint import FileSystemReader

    keys = FileSystemReader(str(reader.path(folder))).read_metadata().state_dict_metadata
    grouped = any(key.startswith("optimizer.param_groups.") for key in keys)
    listed = any(key.startswith("optimizer.param_groups.0.params") for key in keys)
    return grouped and not listed
