"""``load_state`` for the ``xla`` strategy: every file read and checked on CPU, then copied over.

The files are those of every other strategy (``model.safetensors`` or ``pytorch_model.bin``,
``optimizer.bin``). Everything is read into CPU memory and checked against the prepared objects
first (keys, shapes, parameter groups), so a mismatch changes nothing; only then are the values
copied onto the XLA device (``load_state_dict`` copies into the existing XLA parameters, and the
optimizer moves its state next to them). accel-core's checker can't be used as is: it finds tied
weights through their storage's address, which XLA tensors don't expose; here a tied weight is one
``Parameter`` under two names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel_core.checkpointing import CheckpointError, CheckpointReader, names
from accel_core.checkpointing.model_states import check_optimizer_state, strip_wrapper_prefixes

_SHOWN = 5

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
        weights.append(check_weights(file, state, unwrap(model), strict))
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


def check_weights(
    file: str, state: dict[str, Any], model: torch.nn.Module, strict: bool
) -> dict[str, Any]:
    """``state`` keyed like ``model``'s state dict; a ``CheckpointError`` for what doesn't fit.

    Keys missing from the file are allowed for tied weights (safetensors stores them once).
    """
    state = strip_wrapper_prefixes(state)
    expected = model.state_dict(keep_vars=True)
    seen: set[int] = set()
    tied = set()
    for key, value in expected.items():
        if id(value) in seen:
            tied.add(key)
        seen.add(id(value))
    missing = [key for key in expected if key not in state and key not in tied]
    unexpected = [key for key in state if key not in expected]
    if strict and (missing or unexpected):
        raise CheckpointError(
            f"checkpoint file {file} doesn't match model {type(model).__name__}: missing keys "
            f"{_few(missing)}, unexpected keys {_few(unexpected)}. Was it saved from another "
            "model? Pass strict=False to load_state to load the keys that match."
        )
    for key, value in state.items():
        target = expected.get(key)
        if isinstance(target, torch.Tensor) and tuple(value.shape) != tuple(target.shape):
            raise CheckpointError(
                f"checkpoint file {file}: key {key!r} has shape {tuple(value.shape)}, the "
                f"model's has {tuple(target.shape)}. Was it saved from another model?"
            )
    return state


def _few(keys: list[str]) -> str:
    if not keys:
        return "none"
    shown = ", ".join(repr(key) for key in keys[:_SHOWN])
    return shown + (f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else "")
