"""A DeepSpeed save taken on the training thread and written later: how the deepspeed strategy
saves, and what lets ``save_state(async_save=True)`` write in the background.

DeepSpeed 0.19's ``engine.save_checkpoint(save_dir, tag)`` builds each file's state dict from the
live tensors and hands it to ``engine.checkpoint_engine.save(state_dict, path)`` (the default
``TorchCheckpointEngine`` only calls ``torch.save``), with barriers and an all-reduce of the tag
on the default group around them; it writes ``latest`` and copies its recovery scripts
(``zero_to_fp32.py``, ``zero_to_torch.py``) itself. So :func:`capture` runs that save on the
training thread, where every process is in step, with a :class:`_CapturingEngine` swapped in
that keeps each state dict instead of writing it, and a scratch folder for the files DeepSpeed
writes itself. A state dict is kept as it would be pickled: the pickle bytes (every object but
the tensors' storages frozen at the call) and the storages it references, by reference, each
once (views of one storage stay views of one storage). :func:`capture` returns them as a
``{"storages": [uint8 tensors], "capture": CapturedSave}`` dict: the Accelerator copies such a
dict to CPU for an asynchronous save (into the previous save's copies when they fit) and passes it
on untouched for a synchronous one. :func:`write` then rebuilds each state dict over those
storages and saves it with DeepSpeed's own engine, at the path DeepSpeed chose, under the
checkpoint's folder.
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accel_core.checkpointing.errors import CheckpointError

if TYPE_CHECKING:
    from accel_core.checkpointing import CheckpointWriter

#: The protocol ``torch.save`` pickles with.
_PROTOCOL = 2


@dataclass
class CapturedFile:
    """One file DeepSpeed asked its checkpoint engine to save."""

    #: The path under the checkpoint folder, ``/``-separated (``pytorch_model/...pt``).
    name: str
    #: The state dict pickled, each storage replaced by ``(index, dtype)`` (``dtype`` None
    #: for an untyped storage) into the storages.
    pickled: bytes


@dataclass
class CapturedSave:
    """One engine's ``save_checkpoint``, kept to be written later by :func:`write`.

    Attributes:
        engine: DeepSpeed's checkpoint engine of the engine (it writes the files).
        files: the data files this process saves.
        direct: the files DeepSpeed wrote itself (``latest``, its scripts): bytes and mode.
        thread: the thread that took it; ``files`` is None when the engine's checkpoint engine
            is not DeepSpeed's default one: then ``engine.save_checkpoint`` runs in
            :func:`write`, which must be on this thread.
    """

    engine: Any
    files: list[CapturedFile] | None
    direct: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    thread: int = field(default_factory=threading.get_ident)


def capturable(engine: Any) -> bool:
    """Whether ``engine`` saves through DeepSpeed's default ``TorchCheckpointEngine`` (the one
    whose ``save`` is a ``torch.save`` of the state dict, and nothing else)."""
    from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine

    return type(engine.checkpoint_engine) is TorchCheckpointEngine


def capture(engine: Any, tag: str) -> dict[str, Any]:
    """Run ``engine.save_checkpoint`` under ``tag`` without writing its data files (every
    process, together: DeepSpeed's save is a collective on the default group).

    Returns ``{"storages": [...], "capture": CapturedSave}``; for an engine with another
    checkpoint engine (``checkpoint.writer``, DataStates), nothing is taken: :func:`write` saves
    through DeepSpeed then, on this thread only.
    """
    if not capturable(engine):
        return {"storages": [], "capture": CapturedSave(engine.checkpoint_engine, None)}
    storages = _Storages()
    scratch = Path(tempfile.mkdtemp(prefix="accel-deepspeed-save-"))
    original = engine.checkpoint_engine
    capturing = _CapturingEngine(original, scratch, storages)
    try:
        engine.checkpoint_engine = capturing
        try:
            engine.save_checkpoint(str(scratch), tag)
        finally:
            engine.checkpoint_engine = original
        direct = {
            path.relative_to(scratch).as_posix(): _content(path)
            for path in sorted(scratch.rglob("*"))
            if path.is_file()
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "storages": storages.views,
        "capture": CapturedSave(original, capturing.files, direct),
    }


def _content(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), stat.S_IMODE(path.stat().st_mode)


def write(
    writer: CheckpointWriter,
    captured: list[dict[str, Any]],
    save_directly: Callable[[int], None],
) -> None:
    """Write each engine's captured files into ``writer.root`` and record them (every process:
    the files it captured; the files DeepSpeed wrote itself once, the last engine's ``latest``).

    ``save_directly(index)`` saves engine ``index`` through DeepSpeed, for an engine whose save
    was not captured.
    """
    direct: dict[str, tuple[bytes, int]] = {}
    for index, entry in enumerate(captured):
        save: CapturedSave = entry["capture"]
        if save.files is None:
            if threading.get_ident() != save.thread:
                raise CheckpointError(
                    "save_state(async_save=True) under DeepSpeed needs its default checkpoint "
                    f"engine (TorchCheckpointEngine); this engine uses "
                    f"{type(save.engine).__name__}, whose save accel can't take now and write "
                    "later. Call save_state without async_save, or remove `checkpoint.writer` "
                    "(and `datastates`) from the DeepSpeed config."
                )
            save_directly(index)
            continue
        storages = [view.untyped_storage() for view in entry["storages"]]
        for captured_file in save.files:
            path = writer.path(captured_file.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            save.engine.save(_rebuilt(captured_file.pickled, storages), str(path))
            writer.record(captured_file.name)
        direct.update(save.direct)
    for name, (content, mode) in direct.items():
        path = writer.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.chmod(path, mode)
        writer.record(name)


class _CapturingEngine:
    """A DeepSpeed checkpoint engine whose ``save`` keeps the state dict (pickled around its
    storages) and the path under ``scratch``; the rest as DeepSpeed's ``TorchCheckpointEngine``
    (folders are made under ``scratch``, which DeepSpeed's own writes go into)."""

    def __init__(self, original: Any, scratch: Path, storages: _Storages) -> None:
        self.name = "accel-capture"
        self.original = original
        self.scratch = scratch
        self.storages = storages
        self.files: list[CapturedFile] = []

    def create(self, info: Any) -> None:
        pass

    def save(self, state_dict: Any, path: str) -> None:
        name = Path(os.path.relpath(os.path.abspath(path), self.scratch)).as_posix()
        if name.startswith("../"):
            raise CheckpointError(f"DeepSpeed saved {path}, outside its checkpoint folder.")
        buffer = io.BytesIO()
        _Pickler(buffer, self.storages).dump(state_dict)
        self.files.append(CapturedFile(name, buffer.getvalue()))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    def load(self, path: str, map_location: Any = None) -> Any:
        return self.original.load(path, map_location)

    def commit(self, info: Any) -> bool:
        return True

    def is_data_parallel_writer(self, dp_rank: int) -> bool:
        return bool(self.original.is_data_parallel_writer(dp_rank))

    def is_decoupled(self) -> bool:
        return False

    def set_commit_info(self, info: Any) -> None:
        pass

    def get_commit_info(self) -> None:
        return None

    def cleanup(self) -> None:
        pass

    def preserves_storage_sharing(self) -> bool:
        return True


class _Storages:
    """The storages the captured files reference, each once, as flat ``uint8`` tensors over them
    (what the Accelerator copies)."""

    def __init__(self) -> None:
        self.views: list[torch.Tensor] = []
        self._index: dict[tuple[str, int], int] = {}

    def index(self, storage: torch.UntypedStorage) -> int:
        key = (str(storage.device), storage.data_ptr())
        if storage.nbytes() and key in self._index:
            return self._index[key]
        view = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
        self.views.append(view)
        if storage.nbytes():
            self._index[key] = len(self.views) - 1
        return len(self.views) - 1


class _Pickler(pickle.Pickler):
    """Pickles as ``torch.save`` does, each storage left out as ``(index, dtype)``."""

    def __init__(self, file: io.BytesIO, storages: _Storages) -> None:
        super().__init__(file, protocol=_PROTOCOL)
        self.storages = storages

    def persistent_id(self, obj: Any) -> tuple[int, torch.dtype | None] | None:
        if isinstance(obj, torch.storage.TypedStorage):
            return (self.storages.index(obj._untyped_storage), obj.dtype)
        if isinstance(obj, torch.UntypedStorage):
            return (self.storages.index(obj), None)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, storages: list[torch.UntypedStorage]) -> None:
        super().__init__(io.BytesIO(data))
        self.storages = storages

    def persistent_load(self, pid: Any) -> Any:
        index, dtype = pid
        if dtype is None:
            return self.storages[index]
        return torch.storage.TypedStorage(
            wrap_storage=self.storages[index], dtype=dtype, _internal=True
        )


def _rebuilt(pickled: bytes, storages: list[torch.UntypedStorage]) -> Any:
    """The state dict again, its tensors over ``storages`` (the copies, or the live ones)."""
    return _Unpickler(pickled, storages).load()
