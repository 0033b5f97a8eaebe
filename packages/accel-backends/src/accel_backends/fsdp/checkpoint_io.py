"""The checkpoint part of the ``fsdp`` strategy (both versions): full state dicts gathered
through torch.distributed.checkpoint's state-dict functions, and checkpoints that are either
every process's shards through DCP (``SHARDED_STATE_DICT``) or full files written by process 0
(``FULL_STATE_DICT``); any layout loads on any number of processes (DCP reshards)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch

from accel_backends.fsdp import dcp
from accel_core.optimizer import unwrap_optimizer
from accel_core.strategies.checkpoint_io import CheckpointIO

if TYPE_CHECKING:
    from accel_backends.fsdp.common import FSDPStrategy
    from accel_core.checkpointing import CheckpointReader, CheckpointWriter


class FSDPCheckpointIO(CheckpointIO):
    """State dicts and checkpoints of an :class:`~accel_backends.fsdp.common.FSDPStrategy`,
    through its ``_state_module`` (the module torch's state-dict functions take) and
    ``_options`` (its state-dict options)."""

    #: ``save_state(async_save=True)``: the shards are copied to CPU (DTensors, nothing
    #: gathered) while training waits; DCP writes the copies in the background saver's thread
    #: over its own gloo group (``writer.group``), never the default group training uses.
    supports_async_save: ClassVar[bool] = True
    strategy: FSDPStrategy

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The full state dict, gathered on every process (plain tensors)."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(
            self.strategy._state_module(model), options=self.strategy._options(full=True)
        )

    def load_model_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        """Load a full state dict (the same on every process) into the sharded model;
        ``state_dict`` is left as it was (torch replaces the entries of the dict it is given
        by their shards)."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        inner = self.strategy._state_module(model)
        set_model_state_dict(inner, dict(state_dict), options=self.strategy._options(full=True))

    @property
    def _full_checkpoints(self) -> bool:
        from torch.distributed.fsdp import StateDictType

        return self.strategy.plugin.state_dict_type == StateDictType.FULL_STATE_DICT

    def checkpoint_model_states(self, models: list[torch.nn.Module]) -> list[dict[str, Any]]:
        """Each model's shards (``SHARDED_STATE_DICT``), or its full state dict on process 0
        (empty elsewhere) for ``FULL_STATE_DICT``."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        options = self.strategy._options(
            full=self._full_checkpoints, cpu_offload=self._full_checkpoints
        )
        return [
            get_model_state_dict(self.strategy._state_module(m), options=options) for m in models
        ]

    def checkpoint_optimizer_states(
        self, optimizers: list[torch.optim.Optimizer]
    ) -> list[dict[str, Any]]:
        """Each optimizer's state keyed by parameter name (DCP's form), sharded or full."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        options = self.strategy._options(
            full=self._full_checkpoints, cpu_offload=self._full_checkpoints
        )
        return [
            get_optimizer_state_dict(self._owner(o), unwrap_optimizer(o), options=options)
            for o in optimizers
        ]

    def save_checkpoint(
        self,
        writer: CheckpointWriter,
        weights: list[dict[str, Any]],
        optimizer_states: list[dict[str, Any]],
        *,
        safe_serialization: bool = True,
    ) -> None:
        """Sharded: every process writes its shards of each model and optimizer through DCP
        (collectives over ``writer.group``). Full: process 0 writes ``model[_i].safetensors``
        and ``optimizer[_i].bin``, no collective. Either may run in a background thread."""
        if self._full_checkpoints:
            if writer.rank == 0:
                super().save_checkpoint(
                    writer, weights, optimizer_states, safe_serialization=safe_serialization
                )
            return
        for index, state in enumerate(weights):
            dcp.save_section(writer, dcp.model_folder(index), "model", state)
        for index, state in enumerate(optimizer_states):
            dcp.save_section(writer, dcp.optimizer_folder(index), "optimizer", state)

    def load_checkpoint(
        self,
        reader: CheckpointReader,
        models: list[torch.nn.Module],
        optimizers: list[torch.optim.Optimizer],
        *,
        map_location: str | torch.device = "cpu",
        strict: bool = True,
    ) -> None:
        """Read a sharded checkpoint through DCP (any number of processes wrote it), or any other
        layout (full files, DeepSpeed's) converted as it loads, whichever the folder holds."""
        if models and not reader.exists(f"{dcp.model_folder(0)}/.metadata"):
            self._load_full(reader, models, optimizers, strict=strict)
            return
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        sharded = self.strategy._options(full=False, strict=strict)
        loaded = []
        for index, model in enumerate(models):
            inner = self.strategy._state_module(model)
            template = get_model_state_dict(inner, options=sharded)
            folder = dcp.model_folder(index)
            loaded.append(dcp.load_section(reader, folder, "model", template, strict=strict))
        for model, state in zip(models, loaded, strict=True):
            set_model_state_dict(self.strategy._state_module(model), state, options=sharded)
        for index, optimizer in enumerate(optimizers):
            owner, inner_optimizer = self._owner(optimizer), unwrap_optimizer(optimizer)
            template = get_optimizer_state_dict(owner, inner_optimizer, options=sharded)
            folder = dcp.optimizer_folder(index)
            state = dcp.load_section(reader, folder, "optimizer", template, strict=strict)
            set_optimizer_state_dict(owner, inner_optimizer, state, options=sharded)

    def _load_full(
        self,
        reader: CheckpointReader,
        models: list[torch.nn.Module],
        optimizers: list[torch.optim.Optimizer],
        *,
        strict: bool,
    ) -> None:
        """Any other layout (full files of ``FULL_STATE_DICT``, one process or DDP; DeepSpeed's
        partitions), served to torch.distributed.checkpoint by :mod:`accel_core.checkpointing.
        layouts`: DCP plans each process's shards, and each process reads only their regions
        (slices of ``model.safetensors``, the byte ranges of a ZeRO partition)."""
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        from accel_core.checkpointing import layouts

        sharded = self.strategy._options(full=False, strict=strict)
        count = max(len(models), len(optimizers))
        found = [layouts.find_layout(reader, i, loading=self.strategy.name) for i in range(count)]
        loaded = []
        for model, layout in zip(models, found, strict=False):
            template = get_model_state_dict(self.strategy._state_module(model), options=sharded)
            loaded.append(layouts.load_sharded(layout, "model", template, strict=strict))
        for model, state in zip(models, loaded, strict=True):
            set_model_state_dict(self.strategy._state_module(model), state, options=sharded)
        for optimizer, layout in zip(optimizers, found, strict=False):
            owner, inner_optimizer = self._owner(optimizer), unwrap_optimizer(optimizer)
            template = get_optimizer_state_dict(owner, inner_optimizer, options=sharded)
            names = [list(group["params"]) for group in template["param_groups"]]
            state = layouts.load_sharded(
                layout, "optimizer", template, strict=strict, param_names=names
            )
            set_optimizer_state_dict(owner, inner_optimizer, state, options=sharded)

    def _owner(self, optimizer: torch.optim.Optimizer) -> torch.nn.Module:
        owner = self.strategy._owners.get(unwrap_optimizer(optimizer))
        if owner is None:
            raise ValueError(
                "strategy 'fsdp': this optimizer steps none of the prepared models; prepare the "
                "model with (or before) its optimizer."
            )
        return self.strategy._state_module(owner)


__all__ = ["FSDPCheckpointIO"]
