"""Accelerate's checkpoint functions: ``save_accelerator_state`` and friends, on plain objects.

``Accelerator.save_state`` / ``load_state`` are the way to checkpoint (atomic folders, a manifest,
exact resumption). These four functions are for code written against Hugging Face Accelerate's
``accelerate.checkpointing``: they take the objects themselves and write and read the same files
as Accelerate 1.15's functions, in an existing folder, without a manifest:

- ``model.safetensors`` / ``model_<i>.safetensors`` (``pytorch_model.bin`` /
  ``pytorch_model_<i>.bin`` without safetensors), ``optimizer.bin`` / ``optimizer_<i>.bin``,
  ``scheduler.bin`` / ``scheduler_<i>.bin``, ``scaler.pt``, ``dl_state_dict.bin`` /
  ``dl_state_dict_<i>.bin`` (stateful loaders), ``sampler.bin`` / ``sampler_<i>.bin`` (when
  Accelerate writes one: an ``IterableDatasetShard`` loader with a ``SeedableRandomSampler``),
  written by the main process (each node's with ``save_on_each_node``);
- ``random_states_<process_index>.pkl``, written by every process;
- ``custom_checkpoint_<i>.pkl`` (:func:`save_custom_state`).

Reading goes through ``torch.load(weights_only=True)`` and the numpy allow-list, as everywhere in
accel (Accelerate's ``load_custom_state`` unpickles anything: pass ``weights_only=False`` for
that). Models and optimizers are checked against the files (keys, shapes, parameter groups)
before any of them is changed. In a folder written by ``save_state`` each file is checked against
the manifest (size, checksum) when it is read.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from accel_core.checkpointing import model_states as model_io
from accel_core.checkpointing import names, rng_states, safe_load
from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.folder_io import CheckpointReader
from accel_core.checkpointing.manifest import Manifest
from accel_core.serialization import save
from accel_ops import get_pretty_name

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]


def _writes_sampler(dataloader: Any) -> bool:
    """Accelerate writes ``sampler.bin`` only for this combination (rare: an iterable dataset
    loader with a seedable sampler)."""
    from accel_core.data_loader import IterableDatasetShard, SeedableRandomSampler, get_sampler

    return isinstance(getattr(dataloader, "dataset", None), IterableDatasetShard) and isinstance(
        get_sampler(dataloader), SeedableRandomSampler
    )


def save_accelerator_state(
    output_dir: PathLike,
    model_states: list[dict[str, torch.Tensor]],
    optimizers: list[torch.optim.Optimizer],
    schedulers: list[Any],
    dataloaders: list[Any],
    process_index: int,
    step: int,
    scaler: torch.amp.GradScaler | None = None,
    save_on_each_node: bool = False,
    safe_serialization: bool = True,
) -> Path:
    """Write model states, optimizers, schedulers, loader states, the scaler and this process's
    RNG states (with ``step``) into ``output_dir`` under Accelerate's file names.

    Call it on every process: the shared files come from the main process (each node's with
    ``save_on_each_node``), ``random_states_<process_index>.pkl`` from each. Each shared file is
    written atomically. ``model_states`` are state dicts (``safe_serialization`` writes them with
    safetensors, tied tensors once). Returns ``output_dir`` as a ``Path``.
    """
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    # The manifest of an earlier save_state would no longer describe the files.
    (folder / names.MANIFEST).unlink(missing_ok=True)
    for index, state in enumerate(model_states):
        target = folder / names.model_file(index, safe_serialization)
        save(
            state,
            target,
            save_on_each_node=save_on_each_node,
            safe_serialization=safe_serialization,
        )
        logger.info("Model weights saved in %s", target)
    for index, optimizer in enumerate(optimizers):
        target = folder / names.optimizer_file(index)
        save(optimizer.state_dict(), target, save_on_each_node=save_on_each_node)
        logger.info("Optimizer state saved in %s", target)
    for index, scheduler in enumerate(schedulers):
        target = folder / names.scheduler_file(index)
        save(scheduler.state_dict(), target, save_on_each_node=save_on_each_node)
        logger.info("Scheduler state saved in %s", target)
    for index, dataloader in enumerate(dataloaders):
        if _writes_sampler(dataloader):
            from accel_core.data_loader import get_sampler

            target = folder / names.sampler_file(index)
            save(get_sampler(dataloader), target, save_on_each_node=save_on_each_node)
        if getattr(dataloader, "use_stateful_dataloader", False):
            target = folder / names.loader_state_file(index)
            save(dataloader.state_dict(), target, save_on_each_node=save_on_each_node)
            logger.info("Data loader %d state saved in %s", index, target)
    if scaler is not None:
        save(scaler.state_dict(), folder / names.SCALER, save_on_each_node=save_on_each_node)
    target = folder / names.rng_file(process_index)
    torch.save(rng_states.capture(step), target)
    logger.info("Random states saved in %s", target)
    return folder


def load_accelerator_state(
    input_dir: PathLike,
    models: list[torch.nn.Module],
    optimizers: list[torch.optim.Optimizer],
    schedulers: list[Any],
    dataloaders: list[Any],
    process_index: int,
    scaler: torch.amp.GradScaler | None = None,
    map_location: str | None = None,
    load_kwargs: dict[str, Any] | None = None,
    **load_model_func_kwargs: Any,
) -> dict[str, int]:
    """Restore what :func:`save_accelerator_state` (or Accelerate's, or ``save_state``) wrote.

    ``map_location`` (``None`` or ``"cpu"``, or ``"on_device"`` for the process's device) is where
    optimizer states are loaded. ``load_kwargs={"weights_only": False}`` unpickles anything (only
    for files you trust); ``load_model_func_kwargs`` may hold ``strict`` (default True). Random
    states that can't be read are skipped with an info message, as in Accelerate. Returns the
    attributes the caller should set: ``{"step": <saved step>}`` when the RNG file has it.
    """
    if map_location not in (None, "cpu", "on_device"):
        raise TypeError(
            f"load_accelerator_state(map_location={map_location!r}): choose None, 'cpu' or "
            "'on_device'."
        )
    strict = bool(load_model_func_kwargs.pop("strict", True))
    if load_model_func_kwargs:
        raise TypeError(
            f"load_accelerator_state got {sorted(load_model_func_kwargs)}; models are loaded with "
            "load_state_dict, which takes only strict."
        )
    device: str | torch.device = "cpu"
    if map_location == "on_device":
        from accel_ops import PartialState

        device = PartialState().device
    weights_only = bool(dict(load_kwargs or {}).get("weights_only", True))
    folder = Path(input_dir)
    if not folder.is_dir():
        raise CheckpointError(f"load_accelerator_state: {folder} is not a folder.")
    manifest = Manifest.read(folder)
    reader = CheckpointReader(folder, manifest, weights_only=weights_only)  # checks each file read
    scheduler_states = [reader.read_object(names.scheduler_file(i)) for i in range(len(schedulers))]
    scaler_state = reader.read_object(names.SCALER) if scaler is not None else None
    model_io.load_all(reader, models, optimizers, map_location=device, strict=strict)
    logger.info("All model weights and optimizer states loaded successfully")
    for scheduler, state in zip(schedulers, scheduler_states, strict=True):
        scheduler.load_state_dict(state)
    for index, dataloader in enumerate(dataloaders):
        _load_loader(reader, index, dataloader)
    if scaler is not None:
        scaler.load_state_dict(scaler_state)
    return _load_rng(reader, process_index)


def _load_loader(reader: CheckpointReader, index: int, dataloader: Any) -> None:
    sampler_path = reader.path(names.sampler_file(index))
    if _writes_sampler(dataloader) and sampler_path.is_file():
        from accel_core.data_loader import get_sampler

        record = safe_load.load_accelerate_sampler(sampler_path)
        sampler = get_sampler(dataloader)
        sampler.initial_seed = int(getattr(record, "initial_seed", sampler.initial_seed))  # type: ignore[union-attr]
        generator = getattr(record, "generator", None)
        if generator is not None and sampler.generator is not None:  # type: ignore[union-attr]
            sampler.generator.set_state(generator.get_state())  # type: ignore[union-attr]
        sampler.set_epoch(int(getattr(record, "epoch", 0)))  # type: ignore[union-attr]
    state_file = names.loader_state_file(index)
    if getattr(dataloader, "use_stateful_dataloader", False) and reader.exists(state_file):
        dataloader.load_state_dict(reader.read_object(state_file))


def _load_rng(reader: CheckpointReader, process_index: int) -> dict[str, int]:
    try:
        states = reader.read_object(names.rng_file(process_index))
        rng_states.restore(states)
    except (CheckpointError, KeyError, TypeError, ValueError) as error:
        logger.info("Could not load random states: %s", error)
        return {}
    logger.info("All random states loaded successfully")
    return {"step": int(states["step"])} if "step" in states else {}


def save_custom_state(
    obj: Any, path: PathLike, index: int = 0, save_on_each_node: bool = False
) -> None:
    """Write ``obj.state_dict()`` to ``<path>/custom_checkpoint_<index>.pkl`` (main process, or
    each node's with ``save_on_each_node``)."""
    target = Path(path) / names.custom_file(index)
    logger.info("Saving the state of %s to %s", get_pretty_name(obj), target)
    save(obj.state_dict(), target, save_on_each_node=save_on_each_node)


def load_custom_state(obj: Any, path: PathLike, index: int = 0, weights_only: bool = True) -> None:
    """``obj.load_state_dict`` of ``<path>/custom_checkpoint_<index>.pkl``.

    Read with ``weights_only=True`` and the numpy allow-list (tensors, numbers, strings and
    containers of them); ``weights_only=False`` unpickles anything, as Accelerate always does.
    """
    target = Path(path) / names.custom_file(index)
    logger.info("Loading the state of %s from %s", get_pretty_name(obj), target)
    try:
        state = safe_load.load_object(target, "cpu", weights_only)
    except CheckpointError as error:
        if not weights_only or not target.is_file():
            raise
        raise CheckpointError(
            f"{error} With load_custom_state, pass weights_only=False for a file you trust."
        ) from None
    obj.load_state_dict(state)
