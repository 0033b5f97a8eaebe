"""Checkpoints: ``Accelerator.save_state`` / ``load_state`` in Hugging Face Accelerate's layout.

- :mod:`~accel_core.checkpointing.checkpointer`: :class:`Checkpointer`, the Accelerator's part that
  saves and restores its prepared objects; :mod:`~accel_core.checkpointing.mixin` delegates to it.
- :mod:`~accel_core.checkpointing.names`: the file names (Accelerate's, plus our manifest).
- :mod:`~accel_core.checkpointing.folder_io`: :class:`CheckpointWriter` / :class:`CheckpointReader`,
  what a :class:`~accel_core.Strategy` writes and reads through.
- :mod:`~accel_core.checkpointing.manifest`: ``accel_checkpoint.json`` (sizes, checksums, versions).
- :mod:`~accel_core.checkpointing.folders`: automatic names, the temporary folder, pruning.
- :mod:`~accel_core.checkpointing.snapshot` / :mod:`~accel_core.checkpointing.commit` /
  :mod:`~accel_core.checkpointing.background`: taking, writing and committing a checkpoint.
- :mod:`~accel_core.checkpointing.restore` / :mod:`~accel_core.checkpointing.model_states` /
  :mod:`~accel_core.checkpointing.safe_load`: reading one back, checked, without unpickling code.
- :mod:`~accel_core.checkpointing.object_storage` / :mod:`~accel_core.checkpointing.
  remote_checkpoints`: checkpoints at a URL (fsspec), complete once their manifest is stored.
- :mod:`~accel_core.checkpointing.layouts`: any saved layout read per parameter, so a checkpoint
  loads into another strategy (engines add readers through their descriptions).
- :mod:`~accel_core.checkpointing.global_batch`: ``keep_global_batch``, the same run on another
  number of processes.

Names are imported from their modules on first use: an ``Accelerator`` that never saves or loads
never imports the writer, the reader or the manifest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accel_core.checkpointing.errors import CheckpointError
    from accel_core.checkpointing.folder_io import CheckpointReader, CheckpointWriter
    from accel_core.checkpointing.manifest import FileRecord, Manifest

_EXPORTS = {
    "CheckpointError": "errors",
    "CheckpointReader": "folder_io",
    "CheckpointWriter": "folder_io",
    "FileRecord": "manifest",
    "Manifest": "manifest",
}

__all__ = ["CheckpointError", "CheckpointReader", "CheckpointWriter", "FileRecord", "Manifest"]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'accel_core.checkpointing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"accel_core.checkpointing.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
