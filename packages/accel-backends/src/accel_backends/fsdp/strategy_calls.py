"""Accelerate's FSDP functions (``accelerate.utils.fsdp_utils``) for FSDP2 and FSDP1 models.

Same signatures, files and folders as Hugging Face Accelerate 1.15, so checkpoints move between
the two; the work is the fsdp strategy's own (:mod:`accel_backends.fsdp.dcp`,
:mod:`accel_backends.fsdp.sharding`, :mod:`accel_backends.fsdp.full_load`). What each writes into
``output_dir`` for model (optimizer) ``i``, by the plugin's ``state_dict_type``:

- ``FULL_STATE_DICT``: process 0 writes ``pytorch_model_fsdp.bin`` (``pytorch_model_fsdp_<i>.bin``
  for ``i > 0``) and ``optimizer.bin`` (``optimizer_<i>.bin``), ``torch.save`` files of the state
  gathered to it; loading reads them on process 0 and sends every process its shards.
- ``SHARDED_STATE_DICT``: every process writes its shards through torch.distributed.checkpoint
  into ``pytorch_model_fsdp_<i>/`` and ``optimizer_<i>/`` (sections ``"model"``, ``"optimizer"``),
  readable on any number of processes and by :func:`~accel_backends.merge_fsdp_weights`. With
  ``use_dcp=False`` each process instead ``torch.save``-s its shards to
  ``pytorch_model_fsdp_<i>_rank<r>.bin`` / ``optimizer_<i>_rank<r>.bin``: no communication, but
  only the same number of processes can load them.

Every function is a collective: each process calls it. FSDP1 models (``fsdp_version=1``,
``FullyShardedDataParallel``) write the same files; their full state dicts are read on every
process rather than sent from process 0 (torch sends shards from process 0 only to FSDP2's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accel_backends.errors import StrategyNotBuiltError
from accel_backends.fsdp import dcp
from accel_backends.fsdp.full_load import load_full_state_dict
from accel_core.optimizer import unwrap_optimizer

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.nn.modules.module import _IncompatibleKeys

    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin
    from accel_core import Accelerator

logger = logging.getLogger(__name__)

#: Accelerate's file stem of FSDP model weights (``FSDP_MODEL_NAME``).
MODEL_NAME = dcp.MODEL_FOLDER
#: Accelerate's file stem of optimizer states (``OPTIMIZER_NAME``).
OPTIMIZER_NAME = dcp.OPTIMIZER_FOLDER


def save_fsdp_model(
    fsdp_plugin: FullyShardedDataParallelPlugin,
    accelerator: Accelerator,
    model: torch.nn.Module,
    output_dir: str | Path,
    model_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> None:
    """Save the weights of the FSDP ``model`` into ``output_dir`` (see the module docstring).

    ``adapter_only`` (a peft model) keeps the trainable adapter weights only (full state
    dicts).
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    full = _is_full(fsdp_plugin, "save_fsdp_model")
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    inner = _state_dict_module(model)
    options = _options(accelerator, full=full, adapter_only=adapter_only, model=inner)
    state = get_model_state_dict(inner, options=options)
    _write(accelerator, state, folder, "model", model_index, full=full, use_dcp=use_dcp)


def load_fsdp_model(
    fsdp_plugin: FullyShardedDataParallelPlugin,
    accelerator: Accelerator,
    model: torch.nn.Module,
    input_dir: str | Path,
    model_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> _IncompatibleKeys:
    """Load weights saved by :func:`save_fsdp_model` into the FSDP ``model``; returns torch's
    missing and unexpected keys. ``input_dir`` may also be the ``pytorch_model_fsdp_<i>``
    folder itself. A sharded checkpoint may come from any number of processes."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    full = _is_full(fsdp_plugin, "load_fsdp_model")
    accelerator.wait_for_everyone()
    inner = _state_dict_module(model)
    options = _options(accelerator, full=full, adapter_only=adapter_only, model=inner)
    folder = Path(input_dir)
    state = _read(
        accelerator,
        folder,
        "model",
        model_index,
        options,
        lambda: get_model_state_dict(inner, options=options),
        use_dcp=use_dcp,
    )
    result = set_model_state_dict(inner, state, options=options)
    accelerator.wait_for_everyone()
    return result


def save_fsdp_optimizer(
    fsdp_plugin: FullyShardedDataParallelPlugin,
    accelerator: Accelerator,
    optimizer: torch.optim.Optimizer,
    model: torch.nn.Module,
    output_dir: str | Path,
    optimizer_index: int = 0,
    use_dcp: bool = True,
) -> None:
    """Save the state of ``optimizer``, which steps the FSDP ``model``, into ``output_dir``,
    keyed by parameter names (torch.distributed.checkpoint's form)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    full = _is_full(fsdp_plugin, "save_fsdp_optimizer")
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    inner = _state_dict_module(model)
    options = _options(accelerator, full=full, model=inner)
    state = get_optimizer_state_dict(inner, unwrap_optimizer(optimizer), options=options)
    _write(accelerator, state, folder, "optimizer", optimizer_index, full=full, use_dcp=use_dcp)


def load_fsdp_optimizer(
    fsdp_plugin: FullyShardedDataParallelPlugin,
    accelerator: Accelerator,
    optimizer: torch.optim.Optimizer,
    model: torch.nn.Module,
    input_dir: str | Path,
    optimizer_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> None:
    """Load an optimizer state saved by :func:`save_fsdp_optimizer` into ``optimizer`` (which
    steps the FSDP ``model``). ``input_dir`` may also be the ``optimizer_<i>`` folder itself;
    ``adapter_only`` is accepted for Accelerate's signature (the state holds what was saved)."""
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    full = _is_full(fsdp_plugin, "load_fsdp_optimizer")
    accelerator.wait_for_everyone()
    inner, torch_optimizer = _state_dict_module(model), unwrap_optimizer(optimizer)
    options = _options(accelerator, full=full, model=inner)
    folder = Path(input_dir)
    state = _read(
        accelerator,
        folder,
        "optimizer",
        optimizer_index,
        options,
        lambda: get_optimizer_state_dict(inner, torch_optimizer, options=options),
        use_dcp=use_dcp,
    )
    set_optimizer_state_dict(inner, torch_optimizer, state, options=options)
    accelerator.wait_for_everyone()


def fsdp2_prepare_model(accelerator: Accelerator, model: torch.nn.Module) -> torch.nn.Module:
    """Shard ``model`` with FSDP2 in place, as the Accelerator's FSDP plugin says (what the fsdp
    strategy's ``prepare`` does: activation checkpointing, fp32 master weights under mixed
    precision, the policy's units, loading from process 0 with ``cpu_ram_efficient_loading``);
    returns it. A model sharded already is returned as it is."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule

    from accel_backends.fsdp.sharding import shard_model
    from accel_backends.fsdp.strategy import FSDPStrategy

    if isinstance(model, FSDPModule) or isinstance(getattr(model, "_orig_mod", None), FSDPModule):
        return model
    plugin = _plugin_of(accelerator, "fsdp2_prepare_model")
    plugin.set_auto_wrap_policy(model)
    strategy = accelerator.strategy
    mesh = strategy.mesh if isinstance(strategy, FSDPStrategy) else None
    if mesh is None:
        mesh = init_device_mesh(accelerator.device.type, (accelerator.num_processes,))
    mixed = accelerator.mixed_precision != "no"
    shard_model(model, plugin, mesh, accelerator.device, upcast_to_fp32=mixed)
    return model


def fsdp2_load_full_state_dict(
    accelerator: Accelerator,
    model: torch.nn.Module,
    full_sd: dict[str, torch.Tensor],
    cpu_offload: bool = False,
) -> torch.nn.Module:
    """Fill the FSDP2-sharded ``model`` from ``full_sd``, which only the main process needs to
    hold (the others may pass ``{}``): each process receives its shards (see
    :func:`accel_backends.fsdp.full_load.load_full_state_dict`). Returns ``model``."""
    return load_full_state_dict(model, full_sd, device=accelerator.device, cpu_offload=cpu_offload)


#: Each section's file stem (full and per-rank files) and DCP folder of index ``i``.
_STEMS = {"model": MODEL_NAME, "optimizer": OPTIMIZER_NAME}
_DCP_FOLDERS = {"model": dcp.model_folder, "optimizer": dcp.optimizer_folder}


def _write(
    accelerator: Accelerator,
    state: dict[str, Any],
    folder: Path,
    section: str,
    index: int,
    *,
    full: bool,
    use_dcp: bool,
) -> None:
    """Write ``state`` (``section`` "model" or "optimizer", number ``index``) in the form the
    module docstring gives: one full file from process 0, a DCP folder, or a file per rank."""
    if full:
        if accelerator.process_index != 0:
            return
        target = folder / _file(_STEMS[section], index)
        torch.save(state, target)
    elif use_dcp:
        target = folder / _DCP_FOLDERS[section](index)
        dcp.save_folder(target, section, state)
    else:
        target = folder / _rank_file(_STEMS[section], index, accelerator.process_index)
        torch.save(state, target)
    logger.info("%s state saved to %s", section.capitalize(), target)


def _read(
    accelerator: Accelerator,
    folder: Path,
    section: str,
    index: int,
    options: StateDictOptions,
    template: Callable[[], Any],
    *,
    use_dcp: bool,
) -> Any:
    """Read what :func:`_write` wrote. A full file is read where torch won't send it from process
    0 (FSDP1, or one process); a DCP folder fills ``template()`` (the shards to load) and may
    come from any number of processes; ``folder`` may be the DCP folder itself."""
    if options.full_state_dict:
        state: Any = {}
        if accelerator.process_index == 0 or not options.broadcast_from_rank0:
            state = torch.load(folder / _file(_STEMS[section], index), weights_only=True)
    elif use_dcp:
        source = _dcp_folder(folder, _DCP_FOLDERS[section](index))
        state = dcp.load_folder(source, section, template(), strict=options.strict)
    else:
        source = folder / _rank_file(_STEMS[section], index, accelerator.process_index)
        state = torch.load(source, weights_only=True)
    logger.info("%s loaded from %s", section.capitalize(), folder)
    return state


def _is_full(plugin: FullyShardedDataParallelPlugin, what: str) -> bool:
    """Whether ``plugin`` asks for full state dicts (else sharded; FSDP1's
    ``LOCAL_STATE_DICT`` is refused, as by the strategy)."""
    from torch.distributed.fsdp import StateDictType

    from accel_backends.fsdp.plugin import refuse_local_state_dict

    refuse_local_state_dict(plugin, what)
    return plugin.state_dict_type == StateDictType.FULL_STATE_DICT


def _plugin_of(accelerator: Accelerator, what: str) -> FullyShardedDataParallelPlugin:
    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin

    plugin = accelerator.state.fsdp_plugin or getattr(accelerator.strategy, "plugin", None)
    if not isinstance(plugin, FullyShardedDataParallelPlugin):
        raise ValueError(
            f"{what} needs an Accelerator with an FSDP plugin: Accelerator(fsdp_plugin="
            "FullyShardedDataParallelPlugin(fsdp_version=2)), or the fsdp strategy"
        )
    _is_full(plugin, what)
    return plugin


def _options(
    accelerator: Accelerator,
    *,
    full: bool,
    adapter_only: bool = False,
    model: torch.nn.Module | None = None,
) -> StateDictOptions:
    """Accelerate's options: a full state dict is gathered to process 0 on CPU (and sent from
    it when loading) when there are several processes; ``adapter_only`` on a peft model leaves
    the frozen weights out of a full state dict, and loading then accepts their absence (a
    sharded one would need peft's own adapter state dict: not built)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    several = full and accelerator.num_processes > 1 and not _is_fsdp1(model)
    adapter = adapter_only and model is not None and _is_peft_model(model)
    if adapter and not full:
        raise StrategyNotBuiltError(
            "adapter_only with SHARDED_STATE_DICT (peft's sharded adapter checkpoints) is not "
            "built in accel-backends; use state_dict_type='FULL_STATE_DICT' for adapter weights"
        )
    return StateDictOptions(
        full_state_dict=full,
        cpu_offload=several,
        broadcast_from_rank0=several,
        ignore_frozen_params=adapter,
        strict=not adapter,
    )


def _state_dict_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose state dict is the model's (:func:`accel_backends.fsdp.v1_wrapping.
    state_dict_module`), imported here: ``accelerate.utils.fsdp_utils`` is imported by every
    Trainer, most of which never call these functions."""
    from accel_backends.fsdp.v1_wrapping import state_dict_module

    return state_dict_module(model)


def _is_fsdp1(model: torch.nn.Module | None) -> bool:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return isinstance(model, FullyShardedDataParallel)


def _is_peft_model(model: torch.nn.Module) -> bool:
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        return False
    from peft import PeftModel

    return isinstance(model, PeftModel)


def _file(stem: str, index: int) -> str:
    return f"{stem}.bin" if index == 0 else f"{stem}_{index}.bin"


def _rank_file(stem: str, index: int, rank: int) -> str:
    return f"{stem}_{index}_rank{rank}.bin"


def _dcp_folder(folder: Path, name: str) -> Path:
    """``folder/name``, unless ``folder`` is that checkpoint folder itself (Accelerate's rule)."""
    return folder if folder.name == name else folder / name
