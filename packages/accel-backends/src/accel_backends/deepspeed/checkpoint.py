"""DeepSpeed engines in checkpoints and state dicts: ``save_state``, ``load_state``,
``get_state_dict``.

A checkpoint holds each engine under Hugging Face Accelerate 1.15's name (engine ``i`` saves with
``engine.save_checkpoint(<checkpoint>, tag)``, tag ``pytorch_model``, then ``pytorch_model_1``...),
so either library continues the other's DeepSpeed runs. DeepSpeed writes, for tag ``T``:

- ``T/mp_rank_00_model_states.pt`` (ZeRO 0-2, process 0): the weights, the engine's counters and
  its scheduler; ``T/zero_pp_rank_<r>_mp_rank_00_model_states.pt`` under ZeRO-3 (every process);
- ``T/[bf16_]zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` (every process): its optimizer
  partition, with the fp32 master weights;
- ``latest``, ``zero_to_fp32.py``, ``zero_to_torch.py`` (process 0): the tag, and DeepSpeed's
  scripts that rebuild full fp32 weights offline.

Saving, on every process: DeepSpeed's save (a collective that ends with a barrier) with its
state dicts captured, not written (:mod:`accel_backends.deepspeed.async_capture`), then, in the
call or in the background saver's thread, the files written where DeepSpeed would have written
them and recorded in the manifest by the process that saved them: its ``zero_pp_rank_<r>``
files, and process 0 the others. An engine with another DeepSpeed checkpoint engine than the
default saves directly (:func:`save_engine`), synchronously only.

Loading, on every process: every file DeepSpeed reads goes through the checkpoint reader, so it
is checked against the manifest and read with ``torch.load(weights_only=True)``
and the allow-list, plus the four classes DeepSpeed pickles into its files
(:func:`deepspeed_checkpoint_classes`), unless ``load_state(load_kwargs={"weights_only":
False})`` trusts the checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from accel_core.checkpointing.errors import CheckpointError

if TYPE_CHECKING:
    from accel_core.checkpointing import CheckpointReader, CheckpointWriter

#: Accelerate's ``MODEL_NAME``: the tag of the first engine.
MODEL_NAME = "pytorch_model"
_RANK_FILE = re.compile(r"zero_pp_rank_(\d+)_")
_TOP_LEVEL = ("latest", "zero_to_fp32.py", "zero_to_torch.py")
_GATHER_HINT = (
    "set zero3_save_16bit_model=True (DeepSpeedPlugin(zero3_save_16bit_model=True), "
    "`zero_optimization.stage3_gather_16bit_weights_on_model_save: true` in the DeepSpeed "
    "config, or `accel launch --zero3_save_16bit_model true`); or save the sharded checkpoint "
    "with accelerator.save_state(folder) and rebuild full fp32 weights with the "
    "zero_to_fp32.py script DeepSpeed writes there."
)


def engine_tag(index: int) -> str:
    """The checkpoint tag of engine ``index``: ``pytorch_model``, ``pytorch_model_1``..."""
    return MODEL_NAME if index == 0 else f"{MODEL_NAME}_{index}"


def deepspeed_checkpoint_classes() -> list[object]:
    """The classes DeepSpeed 0.19 pickles into its checkpoint files (plain records: an enum,
    the loss scaler and the offsets of flattened parameters)."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [ZeroStageEnum, LossScaler, DynamicLossScaler, fragment_address]


def save_engine(writer: CheckpointWriter, engine: Any, tag: str) -> None:
    """Save ``engine`` into ``writer.root`` under ``tag`` and record this process's files."""
    engine.save_checkpoint(str(writer.root), tag)
    folder = writer.path(tag)
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        found = _RANK_FILE.search(path.name)
        owner = int(found.group(1)) if found else 0
        if owner == writer.rank:
            writer.record(path.relative_to(writer.root).as_posix())
    if writer.rank == 0:
        for name in _TOP_LEVEL:
            if writer.path(name).is_file():
                writer.record(name)


def load_engine(reader: CheckpointReader, engine: Any, tag: str, *, strict: bool) -> None:
    """Load ``engine`` (weights, optimizer partition, engine scheduler, counters) from ``tag``;
    from another layout (full files, a sharded FSDP checkpoint), converted, when the folder has
    no ``tag/`` (:func:`load_converted`)."""
    if not _has_folder(reader, tag):
        index = 0 if tag == MODEL_NAME else int(tag.rsplit("_", 1)[1])
        load_converted(reader, engine, index, strict=strict)
        return
    with _reads_through(reader, engine):
        path, _ = engine.load_checkpoint(
            str(reader.root),
            tag,
            load_module_strict=strict,
            load_optimizer_states=True,
            load_lr_scheduler_states=True,
        )
    if path is None:
        raise CheckpointError(f"DeepSpeed could not load {reader.path(tag)} (see its log above).")


def load_converted(reader: CheckpointReader, engine: Any, index: int, *, strict: bool) -> None:
    """Load model/optimizer ``index`` of another layout into ``engine`` (every process).

    Every process reads each weight and optimizer state whole (DeepSpeed's public setters take
    whole tensors and keep the process's partition): the weights go through
    :func:`load_full_state_dict` (which refreshes the fp32 master weights), then ``exp_avg`` and
    the other per-parameter states through ``deepspeed.utils.safe_set_full_optimizer_state``, and
    each group's ``step`` and settings into the torch optimizer under the partitions. Not
    restored: the engine's own counters (``global_steps``), which other layouts don't keep.
    """
    from accel_core.checkpointing import layouts

    layout = layouts.find_layout(reader, index, loading="deepspeed")
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    load_full_state_dict(engine, layouts.read_model(layout), rank, strict=strict)
    optimizer = engine.optimizer
    if optimizer is None or not layout.has_optimizer():
        return
    from deepspeed.utils import safe_set_full_optimizer_state

    parameters = dict(engine.module.named_parameters())
    groups = getattr(optimizer, "bit16_groups", None) or getattr(optimizer, "fp16_groups", None)
    named = {id(p): n for n, p in parameters.items()}
    names = [[named[id(p)] for p in group] for group in groups or []]
    state = layouts.read_optimizer(layout, names)
    saved_groups = state["param_groups"]
    base = optimizer.optimizer  # the torch optimizer over the fp32 partitions
    per_parameter = sorted(
        {k for v in state["state"].values() for k, t in v.items() if _is_partitioned(t)}
    )
    flats: dict[int, list[torch.Tensor]] = {
        n: list(g["params"]) for n, g in enumerate(base.param_groups)
    }
    # ZeRO-3 lists its fp32 sub-groups in the torch optimizer's groups only during a step
    for sub_group, flat in enumerate(
        getattr(optimizer, "fp32_partitioned_groups_flat", None) or []
    ):
        flats[optimizer.sub_group_to_group_id[sub_group]].append(flat)
    for number, group in enumerate(base.param_groups):
        saved = saved_groups[min(number, len(saved_groups) - 1)]
        group.update({k: v for k, v in saved.items() if k != "params"})
        first = state["state"].get(saved["params"][0], {}) if saved["params"] else {}
        for flat in flats[number]:
            # a fresh engine's optimizer has no state yet (torch makes it at the first step):
            # zeros of the partition's size, which the setters below fill
            entry = base.state[flat]
            for key in per_parameter:
                entry.setdefault(key, torch.zeros_like(flat))
            for key, value in first.items():
                if not _is_partitioned(value):
                    entry[key] = value.clone() if isinstance(value, torch.Tensor) else value
    # ZeRO 1-2 link each parameter to its piece of the state once the state exists (after the
    # first step): link now (DeepSpeed's own method, absent under ZeRO-3, which needs none)
    link = getattr(optimizer, "_lazy_init_hp_params_optimizer_state", None)
    if callable(link):
        link()
    for name, values in state["state"].items():
        for key, value in values.items():
            if _is_partitioned(value):
                safe_set_full_optimizer_state(parameters[name], value, key)


def _is_partitioned(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() > 0


def _has_folder(reader: CheckpointReader, tag: str) -> bool:
    if reader.manifest is not None:
        return any(name.startswith(f"{tag}/") for name in reader.manifest.files)
    return reader.path(tag).is_dir()


@contextlib.contextmanager
def _reads_through(reader: CheckpointReader, engine: Any) -> Iterator[None]:
    """Route the loads of DeepSpeed's own checkpoint engine through ``reader``."""
    checkpoint_engine = engine.checkpoint_engine
    if type(checkpoint_engine).__name__ != "TorchCheckpointEngine":
        if reader.weights_only:
            raise CheckpointError(
                f"DeepSpeed's {type(checkpoint_engine).__name__} reads checkpoints with its own "
                "unrestricted torch.load; if you trust this checkpoint, load it with "
                "accelerator.load_state(folder, load_kwargs={'weights_only': False})."
            )
        yield
        return
    root = os.path.abspath(reader.root)

    def load(path: str, map_location: Any = None) -> Any:
        name = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
        with torch.serialization.safe_globals(deepspeed_checkpoint_classes()):
            return reader.read_object(name, "cpu" if map_location is None else map_location)

    checkpoint_engine.load = load
    try:
        yield
    finally:
        del checkpoint_engine.load


def full_state_dict(engine: Any, rank: int) -> dict[str, torch.Tensor]:
    """The whole model's state dict on CPU: on process 0 only under ZeRO-3 (gathered one module
    at a time; empty elsewhere), on every process otherwise. Call it on every process.

    Raises:
        ValueError: under ZeRO-3 without ``stage3_gather_16bit_weights_on_model_save``.
    """
    if engine.zero_optimization_partition_weights():
        if not engine.zero_gather_16bit_weights_on_model_save():
            raise ValueError(
                "Cannot gather the weights of this ZeRO-3 model: "
                "stage3_gather_16bit_weights_on_model_save is false in the DeepSpeed config. To "
                "get them, " + _GATHER_HINT
            )
        gathered = engine._zero3_consolidated_16bit_state_dict()
        return dict(gathered) if rank == 0 and gathered is not None else {}
    from deepspeed.checkpoint.utils import clone_tensors_for_torch_save

    return clone_tensors_for_torch_save(engine.module.state_dict())


def load_full_state_dict(
    engine: Any, state_dict: dict[str, torch.Tensor], rank: int, *, strict: bool = True
) -> None:
    """Load a full state dict (process 0's counts under ZeRO-3) into the engine's module, then
    refresh the optimizer's fp32 master weights from it. Keys and shapes are checked first."""
    module: torch.nn.Module = engine.module
    _check_keys(module, state_dict, strict)
    if engine.zero_optimization_partition_weights():
        import deepspeed

        for prefix, child in module.named_modules():
            dot = f"{prefix}." if prefix else ""
            params = list(child.named_parameters(recurse=False))
            with deepspeed.zero.GatheredParameters([p for _, p in params], modifier_rank=0):
                if rank == 0:
                    with torch.no_grad():
                        for name, param in params:
                            if f"{dot}{name}" in state_dict:
                                param.copy_(state_dict[f"{dot}{name}"])
            with torch.no_grad():
                for name, buffer in child.named_buffers(recurse=False):
                    if f"{dot}{name}" in state_dict:
                        buffer.copy_(state_dict[f"{dot}{name}"])
    else:
        module.load_state_dict(state_dict, strict=strict)
    refresh = getattr(engine.optimizer, "refresh_fp32_params", None)
    if callable(refresh):
        refresh()


def _check_keys(module: torch.nn.Module, state_dict: dict[str, torch.Tensor], strict: bool) -> None:
    expected = {
        name: tuple(getattr(tensor, "ds_shape", tensor.shape))
        for name, tensor in module.state_dict(keep_vars=True).items()
    }
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    shapes = sorted(
        f"{name}: {tuple(state_dict[name].shape)} for {expected[name]}"
        for name in set(expected) & set(state_dict)
        if tuple(state_dict[name].shape) != expected[name]
    )
    if shapes or (strict and (missing or unexpected)):
        raise ValueError(
            "the state dict does not fit the DeepSpeed model; nothing was loaded. "
            f"Missing: {missing[:5]}; unexpected: {unexpected[:5]}; other shapes: {shapes[:5]}."
        )
