"""``save_state`` / ``load_state`` at a URL: the steps around the local machinery.

Saving: :func:`prepare_save` empties this machine's staging folder and deletes an older folder at
the URL (so no file of it is mistaken for part of the new checkpoint); then the save runs as a
local one into the staging folder, uploading as it goes (see :mod:`.commit`). Loading:
:func:`download_for_loading` brings the checkpoint into the staging folder (the processes of a
machine download a share each), after which ``load_state`` checks and reads it as a local
folder (the files were checked against the manifest's sizes and checksums as they arrived, so
they are not read a second time for it); :func:`finish_loading` deletes it once every process is
done with it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from accel_core.checkpointing import object_storage, object_transfers
from accel_core.checkpointing.errors import CheckpointError, failure_text
from accel_core.checkpointing.manifest import Manifest
from accel_core.checkpointing.names import MANIFEST
from accel_core.checkpointing.object_storage import RemoteFolder

if TYPE_CHECKING:
    from accel_core.checkpointing.checkpointer import Checkpointer


def node_of(checkpointer: Checkpointer) -> int:
    """The number of this process's machine (the global rank of its local main process)."""
    state = checkpointer.state
    return state.process_index - state.local_process_index


def prepare_save(checkpointer: Checkpointer, target: RemoteFolder) -> Path:
    """Before the save's meeting: this machine's empty staging folder (made by its local main
    process); the main process deletes what is stored at ``target``. Returns the folder."""
    state = checkpointer.state
    staging = object_storage.staging_folder(target, node_of(checkpointer))
    if state.is_local_main_process:
        object_storage.remove_staging(staging)
        staging.mkdir(parents=True)
    if state.is_main_process and target.exists():
        object_storage.remove(target)
    return staging


def download_for_loading(checkpointer: Checkpointer, source: RemoteFolder) -> Path:
    """Copy the checkpoint at ``source`` into this machine's staging folder (every process
    calls it and downloads a share; all meet before it returns) and return the folder."""
    state = checkpointer.state
    staging = object_storage.staging_folder(source, node_of(checkpointer))
    found = None
    try:
        text = object_storage.read_text(source, MANIFEST)
        if text is None:
            raise CheckpointError(
                f"load_state: {source.url} is not a complete checkpoint (it has no {MANIFEST}, "
                "which is stored last: the save never finished, or this is not a checkpoint)."
            )
        staging.mkdir(parents=True, exist_ok=True)
        if state.is_local_main_process:
            (staging / MANIFEST).write_text(text)
        manifest = Manifest.read_text(text, source.url)
        names = sorted(manifest.files)
        share = names[state.local_process_index :: _local_world(state.num_processes)]
        mine = {name: manifest.files[name] for name in share}
        object_transfers.download(source, mine, manifest.block_size, staging)
    except CheckpointError as caught:
        found = str(caught)
    except Exception as caught:  # the store's own errors (botocore's...) as well as OSError
        found = f"load_state: downloading {source.url} failed: {failure_text(caught)}"
    reports = checkpointer.meet("load_state", found)
    if reports:
        if state.is_local_main_process:
            object_storage.remove_staging(staging)
        raise CheckpointError(reports[0])
    return staging


def _local_world(num_processes: int) -> int:
    # as restore's checksum share: the launcher's LOCAL_WORLD_SIZE, else every process is local
    return max(1, min(num_processes, int(os.environ.get("LOCAL_WORLD_SIZE", num_processes))))


def finish_loading(checkpointer: Checkpointer, staging: Path) -> None:
    """Delete the staging folder once every process finished loading from it."""
    checkpointer.meet("load_state")
    if checkpointer.state.is_local_main_process:
        object_storage.remove_staging(staging)
