"""Writing and reading FSDP2 checkpoints through ``torch.distributed.checkpoint`` (DCP).

Sharded checkpoints use Hugging Face Accelerate 1.15's folder names and layout: the model's
state dict under ``{"model": ...}`` in ``pytorch_model_fsdp_<i>/``, the optimizer's under
``{"optimizer": ...}`` in ``optimizer_<i>/``. Every process writes its own shards
(``__<rank>_<n>.distcp``), the first one also ``.metadata``; each records only what it wrote.
Loading goes through DCP too, so a checkpoint written on another number of processes reshards.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel_core.checkpointing import CheckpointReader, CheckpointWriter

#: Accelerate's folder stems (``FSDP_MODEL_NAME``, ``OPTIMIZER_NAME``).
MODEL_FOLDER = "pytorch_model_fsdp"
OPTIMIZER_FOLDER = "optimizer"


def model_folder(index: int) -> str:
    """``pytorch_model_fsdp_<index>``: the DCP folder of model ``index``."""
    return f"{MODEL_FOLDER}_{index}"


def optimizer_folder(index: int) -> str:
    """``optimizer_<index>``: the DCP folder of optimizer ``index``."""
    return f"{OPTIMIZER_FOLDER}_{index}"


def save_folder(target: str | Path, section: str, state: Any, *, group: Any = None) -> None:
    """``dcp.save({section: state})`` into the folder ``target``, created if missing (a
    collective over ``group``, the default group when ``None``: every process calls it and
    writes its own shards)."""
    import torch.distributed.checkpoint as dcp

    Path(target).mkdir(parents=True, exist_ok=True)
    dcp.save(
        {section: state}, storage_writer=dcp.FileSystemWriter(str(target)), process_group=group
    )


def load_folder(source: str | Path, section: str, template: Any, *, strict: bool = True) -> Any:
    """Fill ``template`` (a state dict of this process's shards) from the DCP folder ``source``,
    saved by any number of processes (a collective). DCP plans the whole read first: a missing
    key (with ``strict``) or a shape mismatch raises before anything is read."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    state = {section: template}
    dcp.load(
        state,
        storage_reader=dcp.FileSystemReader(str(source)),
        planner=DefaultLoadPlanner(allow_partial_load=not strict),
    )
    return state[section]


def save_section(writer: CheckpointWriter, folder: str, section: str, state: Any) -> None:
    """:func:`save_folder` into ``writer.path(folder)`` (a collective over ``writer.group``:
    every process calls it), then record the files this process wrote."""
    target = writer.path(folder)
    save_folder(target, section, state, group=writer.group)
    for path in sorted(target.glob(f"__{writer.rank}_*.distcp")):
        writer.record(f"{folder}/{path.name}")
    if writer.rank == 0:
        writer.record(f"{folder}/.metadata")


def load_section(
    reader: CheckpointReader, folder: str, section: str, template: Any, *, strict: bool
) -> Any:
    """Fill ``template`` (a state dict of the right shards) from ``reader.path(folder)``.

    Every file of the folder is checked against the manifest first; then :func:`load_folder`.
    """
    _verify_folder(reader, folder)
    return load_folder(reader.path(folder), section, template, strict=strict)


def _verify_folder(reader: CheckpointReader, folder: str) -> None:
    from accel_core.checkpointing.errors import CheckpointError

    if reader.manifest is not None:
        names = [name for name in reader.manifest.files if name.startswith(f"{folder}/")]
        if not names:
            raise CheckpointError(f"checkpoint {reader.root} has no {folder}/ (a sharded FSDP one)")
        for name in names:
            reader.verify(name)
    elif not (Path(reader.path(folder)) / ".metadata").is_file():
        raise CheckpointError(f"checkpoint {reader.root} has no {folder}/.metadata")
