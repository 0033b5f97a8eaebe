"""Model and optimizer states in a checkpoint: keyed as Accelerate keys them, checked, then loaded.

Weights are written under the keys of the model inside its wrappers, as Hugging Face Accelerate
1.15 writes them (it saves the model it was given, not the DDP or ``torch.compile`` wrapper around
it, and loads strictly into that model): no ``module.`` / ``_orig_mod.`` prefix. Reading, keys are
matched whatever wrapper wrote them, so an older checkpoint with ``module.*`` keys still loads.
A missing or unexpected key, a shape that differs, or an optimizer whose parameter groups don't
match is a :class:`CheckpointError` naming the file, the key and both sides, raised before any
state is loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from accel_core.checkpointing import host_copy, layouts, names, weights_file
from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.folder_io import CheckpointReader
from accel_core.unwrap import extract_model_from_parallel

_WRAPPER_PREFIXES = ("module.", "_orig_mod.")
_LOADING = "ddp / single_device"
_SHOWN = 5


def strip_wrapper_prefixes(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` without the ``module.`` / ``_orig_mod.`` prefixes every key carries."""
    changed = True
    while changed and state:
        changed = False
        for prefix in _WRAPPER_PREFIXES:
            if all(key.startswith(prefix) for key in state):
                state = {key[len(prefix) :]: value for key, value in state.items()}
                changed = True
    return state


@dataclass
class ModelWeights:
    """The weights of one model in a checkpoint, read (``.bin``) or only described (safetensors:
    its header), and how to put them into the model once every check has passed."""

    file: Path
    state: dict[str, Any]
    entries: dict[str, weights_file.WeightEntry] | None = None

    def load_into(self, model: torch.nn.Module, checked: dict[str, Any]) -> None:
        """Load the keys of ``checked`` (the state after :func:`check_model_state`)."""
        if self.entries is None:
            model.load_state_dict(checked, strict=False)
            return
        targets = model.state_dict(keep_vars=True)
        entries = {key: self.entries[key] for key in checked if key in targets}
        if weights_file.loads_plainly(model):
            weights_file.read_into(self.file, entries, targets)
        else:
            model.load_state_dict(weights_file.read_tensors(self.file, entries), strict=False)


def read_model_state(reader: CheckpointReader, index: int, device: str) -> ModelWeights:
    """The weights of model ``index``: safetensors (described by its header, read later straight
    into the model), else ``pytorch_model*.bin`` (read now), else any other layout an engine reads
    (:func:`.layouts.find_layout`: a sharded or DeepSpeed checkpoint, converted, read now)."""
    name = names.model_file(index, safe_serialization=True)
    if reader.exists(name):
        reader.verify(name)
        path = reader.path(name)
        entries = weights_file.read_header(path)
        if entries is None:
            return ModelWeights(path, reader.read_tensors(name, device))
        entries = strip_wrapper_prefixes(entries)
        return ModelWeights(path, {key: e.meta() for key, e in entries.items()}, entries)
    name = names.model_file(index, safe_serialization=False)
    if reader.exists(name):
        return ModelWeights(reader.path(name), reader.read_object(name, device))
    # another layout (a sharded or DeepSpeed checkpoint): every tensor read whole
    layout = layouts.find_layout(reader, index, loading=_LOADING)
    return ModelWeights(reader.root / layout.files, layouts.read_model(layout))


def _has_full_weights(reader: CheckpointReader, index: int) -> bool:
    return any(reader.exists(names.model_file(index, safe)) for safe in (True, False))


def _keyed_by_name(state: Any) -> bool:
    groups = state.get("param_groups") if isinstance(state, dict) else None
    return bool(groups) and all(
        isinstance(p, str) for group in groups for p in group.get("params", [])
    )


def _param_names(models: list[torch.nn.Module], optimizer: Any) -> list[list[str]]:
    """The names of ``optimizer``'s parameters in the model it steps (group by group)."""
    inner = getattr(optimizer, "optimizer", optimizer)
    first = next((p for g in inner.param_groups for p in g["params"]), None)
    for model in models:
        if first is None or any(p is first for p in model.parameters()):
            return layouts.optimizer_param_names(model, inner)
    return [[] for _ in inner.param_groups]


def check_model_state(
    file: str, state: dict[str, Any], model: torch.nn.Module, strict: bool
) -> dict[str, Any]:
    """``state`` keyed like ``model``'s state dict (``model`` is the user's model, out of its
    wrappers); raise on what doesn't fit."""
    state = strip_wrapper_prefixes(state)
    expected = model.state_dict(keep_vars=True)
    missing = [key for key in expected if key not in state]
    unexpected = [key for key in state if key not in expected]
    tied = _tied_names(expected)
    missing = [key for key in missing if key not in tied]
    if strict and (missing or unexpected):
        raise CheckpointError(
            f"checkpoint file {file} doesn't match model {type(model).__name__}: "
            f"missing keys {_few(missing)}, unexpected keys {_few(unexpected)}. Was it saved from "
            "another model? Pass strict=False to load_state to load the keys that match."
        )
    for key, value in state.items():
        target = expected.get(key)
        if (
            isinstance(value, torch.Tensor)
            and isinstance(target, torch.Tensor)
            and value.shape != target.shape
        ):
            raise CheckpointError(
                f"checkpoint file {file}: key {key!r} has shape {tuple(value.shape)}, the "
                f"model's has {tuple(target.shape)}. Was it saved from another model?"
            )
    return state


def _tied_names(state: dict[str, Any]) -> set[str]:
    """Keys whose tensor is an earlier key's: the same ``Parameter`` under two names (tied
    weights, on any device), or a tensor sharing its storage (saved once by safetensors)."""
    seen_tensors: set[int] = set()
    seen_storages: set[tuple[int, int]] = set()
    tied = set()
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            continue
        storage = _storage_of(value)
        if id(value) in seen_tensors or (storage is not None and storage in seen_storages):
            tied.add(key)
        seen_tensors.add(id(value))
        if storage is not None:
            seen_storages.add(storage)
    return tied


def _storage_of(tensor: torch.Tensor) -> tuple[int, int] | None:
    """Where ``tensor``'s data starts, or ``None`` where the device has no addressable storage
    (meta, XLA)."""
    if tensor.device.type == "meta":
        return None
    try:
        return (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
    except RuntimeError:
        return None


def check_optimizer_state(file: str, state: dict[str, Any], optimizer: Any) -> None:
    """Raise if ``state`` was not saved from an optimizer over the same parameters."""
    groups = state.get("param_groups")
    current = optimizer.param_groups
    if not isinstance(groups, list) or "state" not in state:
        raise CheckpointError(f"checkpoint file {file} is not an optimizer state_dict.")
    if len(groups) != len(current):
        raise CheckpointError(
            f"checkpoint file {file} has {len(groups)} parameter group(s), the optimizer has "
            f"{len(current)}. Was it saved from another optimizer?"
        )
    for number, (saved, live) in enumerate(zip(groups, current, strict=True)):
        if len(saved["params"]) != len(live["params"]):
            raise CheckpointError(
                f"checkpoint file {file}: parameter group {number} has {len(saved['params'])} "
                f"parameters, the optimizer's has {len(live['params'])}."
            )
        for saved_id, parameter in zip(saved["params"], live["params"], strict=True):
            for key, value in state["state"].get(saved_id, {}).items():
                if (
                    isinstance(value, torch.Tensor)
                    and value.ndim > 0
                    and value.shape != parameter.shape
                ):
                    raise CheckpointError(
                        f"checkpoint file {file}: state {key!r} of parameter {saved_id} (group "
                        f"{number}) has shape {tuple(value.shape)}, the parameter has "
                        f"{tuple(parameter.shape)}. Was it saved from another model?"
                    )


def load_all(
    reader: CheckpointReader,
    models: list[torch.nn.Module],
    optimizers: list[Any],
    *,
    map_location: str | torch.device = "cpu",
    strict: bool = True,
    unwrap: Callable[[torch.nn.Module], torch.nn.Module] = extract_model_from_parallel,
) -> None:
    """Read and check every model and optimizer state, then load them all. ``unwrap`` gives the
    user's model out of a prepared one (``extract_model_from_parallel``)."""
    device = str(map_location)
    models = [unwrap(model) for model in models]
    weights, checked = [], []
    for index, model in enumerate(models):
        found = read_model_state(reader, index, "cpu")
        weights.append(found)
        checked.append(check_model_state(str(found.file), found.state, model, strict))
    optimizer_states = []
    for index, optimizer in enumerate(optimizers):
        file = names.optimizer_file(index)
        if not reader.exists(file) and not _has_full_weights(reader, index):
            param_names = _param_names(models, optimizer)
            # another layout (sharded, DeepSpeed's): converted to torch's form, read whole
            layout = layouts.find_layout(reader, index, loading=_LOADING)
            state = layouts.read_optimizer(layout, param_names)
            where = f"{reader.root} ({layout.describe()})"
            state = layouts.index_keyed(state, param_names, where)
            check_optimizer_state(where, state, optimizer)
            optimizer_states.append((state, False))
            continue
        # On CPU the file is mapped and each value copied once: into the optimizer's own tensor
        # when it has state already (a reload in the same process: nothing allocated), else into
        # new memory, which is faster than torch.load reading into fresh pages (2 processes,
        # 336 MB: 0.143 s against 0.159 s a load). Nothing stays mapped afterwards.
        mapped = device == "cpu"
        state = _read_optimizer_state(reader, file, device, mapped)
        if _keyed_by_name(state):  # FSDP's FULL_STATE_DICT: DCP's form
            where = str(reader.path(file))
            state = layouts.index_keyed(state, _param_names(models, optimizer), where)
        check_optimizer_state(str(reader.path(file)), state, optimizer)
        optimizer_states.append((state, mapped))
    for model, found, state in zip(models, weights, checked, strict=True):
        found.load_into(model, state)
    for optimizer, (state, mapped) in zip(optimizers, optimizer_states, strict=True):
        if mapped:
            state = into_live_tensors(state, optimizer)
        optimizer.load_state_dict(state)


def _read_optimizer_state(reader: CheckpointReader, file: str, device: str, mapped: bool) -> Any:
    if mapped:
        try:
            return reader.read_object(file, device, mmap=True)
        except CheckpointError:
            pass  # a file torch can't map (the legacy format): read it
    return reader.read_object(file, device)


def into_live_tensors(state: dict[str, Any], optimizer: Any) -> dict[str, Any]:
    """``state`` (its tensors mapped from the file) with each tensor copied into the tensor the
    optimizer holds for the same parameter and key, where shape and dtype match, and copied into
    new memory elsewhere: no tensor of the result refers to the file."""
    live = optimizer.state_dict()["state"]
    taken: dict[Any, dict[str, Any]] = {}
    with torch.no_grad():
        for index, entries in state["state"].items():
            current = live.get(index, {})
            taken[index] = {}
            for key, value in entries.items():
                target = current.get(key)
                if not isinstance(value, torch.Tensor):
                    taken[index][key] = value
                elif (
                    isinstance(target, torch.Tensor)
                    and target.shape == value.shape
                    and target.dtype == value.dtype
                ):
                    taken[index][key] = host_copy.copy_into(target, value)
                else:
                    taken[index][key] = host_copy.copy_new(value)
    return {**state, "state": taken}


def _few(keys: list[str]) -> str:
    if not keys:
        return "none"
    shown = ", ".join(repr(key) for key in keys[:_SHOWN])
    return shown + (f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else "")
