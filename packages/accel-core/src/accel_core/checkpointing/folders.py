"""Where checkpoints go: automatic names, the temporary folder, the final rename, pruning.

A checkpoint is written into ``.<name>.incomplete`` beside its final place and renamed to
``<name>`` only once every process has finished and the manifest is written. So a folder with the
final name is always complete; a process killed mid-save leaves only the hidden temporary
folder, which is never counted by ``total_limit`` nor picked by ``load_state()``, and which the
next save to the same name removes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.names import AUTOMATIC_PATTERN, MANIFEST, rng_file


def temporary_folder(target: Path) -> Path:
    """The hidden folder a checkpoint for ``target`` is written into."""
    return target.parent / f".{target.name}.incomplete"


def is_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` is a complete checkpoint: ours (a manifest) or Accelerate's (RNG file)."""
    return (folder / MANIFEST).is_file() or (folder / rng_file(0)).is_file()


def automatic_checkpoints(checkpoints_dir: Path) -> list[tuple[int, Path]]:
    """The complete ``checkpoint_<n>`` folders of ``checkpoints_dir``, oldest (lowest n) first."""
    if not checkpoints_dir.is_dir():
        return []
    found = []
    for entry in checkpoints_dir.iterdir():
        match = AUTOMATIC_PATTERN.match(entry.name)
        if match and entry.is_dir() and is_checkpoint(entry):
            found.append((int(match.group(1)), entry))
    return sorted(found)


def latest_checkpoint(checkpoints_dir: Path) -> Path:
    """The newest complete automatic checkpoint; ``CheckpointError`` when there is none."""
    found = automatic_checkpoints(checkpoints_dir)
    if not found:
        raise CheckpointError(
            f"load_state() found no complete checkpoint_<n> folder in {checkpoints_dir}; pass "
            "input_dir, or save one first."
        )
    return found[-1][1]


def iteration_of(folder: Path) -> int | None:
    """``n`` for a folder named ``checkpoint_<n>``, else ``None``."""
    match = AUTOMATIC_PATTERN.match(folder.name)
    return int(match.group(1)) if match else None


def prepare_temporary(target: Path) -> Path:
    """Create an empty temporary folder for ``target`` (removing a leftover of a crashed save)."""
    if target.exists() and not target.is_dir():
        raise CheckpointError(f"save_state: {target} exists and is a file, expected a folder.")
    temporary = temporary_folder(target)
    if temporary.exists():
        shutil.rmtree(temporary)
    temporary.mkdir(parents=True)
    return temporary


def move_into_place(temporary: Path, target: Path) -> None:
    """Rename the finished ``temporary`` folder to ``target``, replacing an older one there."""
    from accel_core.checkpointing.folder_io import fsync_folder

    previous = None
    if target.exists():
        previous = target.parent / f".{target.name}.replaced"
        if previous.exists():
            shutil.rmtree(previous)
        os.replace(target, previous)
    os.replace(temporary, target)
    fsync_folder(target.parent)
    if previous is not None:
        shutil.rmtree(previous, ignore_errors=True)


def prune(checkpoints_dir: Path, total_limit: int) -> list[Path]:
    """Remove the oldest complete automatic checkpoints beyond ``total_limit``; returns them."""
    found = automatic_checkpoints(checkpoints_dir)
    removed = [folder for _, folder in found[: max(0, len(found) - total_limit)]]
    for folder in removed:
        # Rename first so a crash mid-removal never leaves a half-deleted "complete" checkpoint.
        doomed = folder.parent / f".{folder.name}.removing"
        os.replace(folder, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    return removed
