"""``load_state`` for the ``xla`` strategy: every file read and checked on CPU, then copied over.

The files are those of every other strategy (``model.safetensors`` or ``pytorch_model.bin``,
``optimizer.bin``). Everything is read into CPU memory and checked against the prepared objects
first (keys, shapes, parameter groups), so a mismatch changes nothing; only then are the values
copied onto the XLA device (``load_state_dict`` copies into the existing XLA parameters, and the
optimizer moves its state next to them). The checks are accel-core's (``check_model_state``,
``check_optimizer_state``), which find a tied weight as one ``Parameter`` under two names on any
device.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from accel_core.checkpointing import CheckpointError, CheckpointReader, names
from accel_core.checkpointing.model_states import check_model_state, check_optimizer_state

#: ``unwrap(model)``: the user's model inside the prepared one.
Unwrap = Callable[[torch.nn.Module], torch.nn.Module]


def load_states(
    reader: CheckpointReader,
    models: list[torch.nn.Module],
    optimizers: list[torch.optim.Optimizer],
    unwrap: Unwrap,
    *,
    strict: bool,
) -> None:
    """Read and check the weights of ``models`` and the states of ``optimizers``, then load."""
    weights = []
    for index, model in enumerate(models):
        file, state = read_weights(reader, index)
        weights.append(check_model_state(file, state, unwrap(model), strict))
    optimizer_states = []
    for index, optimizer in enumerate(optimizers):
        name = names.optimizer_file(index)
        state = reader.read_object(name, "cpu")
        check_optimizer_state(str(reader.path(name)), state, optimizer)
        optimizer_states.append(state)
    for model, state in zip(models, weights, strict=True):
        unwrap(model).load_state_dict(state, strict=False)
    for optimizer, state in zip(optimizers, optimizer_states, strict=True):
        optimizer.load_state_dict(state)


def read_weights(reader: CheckpointReader, index: int) -> tuple[str, dict[str, torch.Tensor]]:
    """Model ``index``'s weights on CPU, from safetensors or else ``pytorch_model*.bin``."""
    safe = names.model_file(index, safe_serialization=True)
    if reader.exists(safe):
        return str(reader.path(safe)), reader.read_tensors(safe, "cpu")
    pickled = names.model_file(index, safe_serialization=False)
    if reader.exists(pickled):
        return str(reader.path(pickled)), reader.read_object(pickled, "cpu")
    raise CheckpointError(
        f"checkpoint {reader.root} has no weights for model {index}: neither {safe} nor "
        f"{pickled} (it was saved with fewer prepared models)."
    )
