"""The offload-storage interface: where weights not held in memory live, read and written by key.

``OffloadStorage`` is the contract (DESIGN.md, interface 4); ``DiskOffloadStorage`` keeps tensors
in an offload folder in Accelerate's format. Call order: any number of ``write`` and
``add_reference`` calls, then ``flush`` (which makes the index durable); ``read``, ``keys`` and
``in`` work at any time, also from a prefetching thread, and see every write made before them.
"""

from __future__ import annotations

import abc
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from accel_bigmodel.dtypes import dtype_name
from accel_bigmodel.offload import INDEX_NAME, offload_weight, read_index_entry, save_offload_index


class OffloadStorage(abc.ABC):
    """Tensors stored outside the model, addressed by their state-dict name."""

    @abc.abstractmethod
    def write(self, key: str, tensor: torch.Tensor) -> None:
        """Store a copy of ``tensor`` under ``key`` (replacing any previous value)."""

    @abc.abstractmethod
    def read(self, key: str) -> torch.Tensor:
        """Return the tensor stored under ``key`` as a new CPU tensor; KeyError if absent."""

    @abc.abstractmethod
    def keys(self) -> list[str]:
        """Every stored key."""

    def flush(self) -> None:  # noqa: B027 - a no-op for storages without an index
        """Make every write durable. Called once after the writes of a load."""

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())


class DiskOffloadStorage(OffloadStorage):
    """An offload folder: ``<key>.dat`` files plus ``index.json`` (Accelerate's format).

    ``add_reference`` records a tensor that already sits in a safetensors file: the index points
    at that file and key and no bytes are written.
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        check_writable(self.folder)
        self._lock = threading.Lock()
        path = self.folder / INDEX_NAME
        self.index: dict[str, dict[str, Any]] = {}
        if path.exists():
            self.index = json.loads(path.read_text())
        self.written: list[Path] = []
        self.bytes_written = 0

    def write(self, key: str, tensor: torch.Tensor) -> None:
        with self._lock:
            offload_weight(tensor, key, self.folder, index=self.index)
            self.written.append(self.folder / f"{key}.dat")
            self.bytes_written += tensor.numel() * tensor.element_size()

    def add_reference(
        self,
        key: str,
        safetensors_file: str | os.PathLike,
        weight_name: str,
        dtype: torch.dtype,
        shape: list[int],
    ) -> None:
        """Point ``key`` at ``weight_name`` in ``safetensors_file``, to be read as ``dtype``."""
        with self._lock:
            self.index[key] = {
                "safetensors_file": str(Path(safetensors_file).resolve()),
                "weight_name": weight_name,
                "dtype": dtype_name(dtype),
                "shape": list(shape),
            }

    def alias(self, key: str, existing: str) -> None:
        """Make ``key`` read the same tensor as ``existing`` (tied weights).

        A safetensors reference is shared; a ``.dat`` file is found by its key in Accelerate's
        format, so it is copied.
        """
        entry = self.index[existing]
        if entry.get("safetensors_file") is not None:
            with self._lock:
                self.index[key] = dict(entry)
        else:
            self.write(key, self.read(existing))

    def read(self, key: str) -> torch.Tensor:
        return read_index_entry(self.folder, key, self.index[key])

    def keys(self) -> list[str]:
        return list(self.index)

    def flush(self) -> None:
        save_offload_index(self.index, self.folder)

    def discard_writes(self) -> None:
        """Delete the ``.dat`` files this object wrote (used when a load fails half-way)."""
        for path in self.written:
            path.unlink(missing_ok=True)
        self.written.clear()


def check_writable(folder: str | os.PathLike) -> None:
    """Create ``folder`` if needed and check that files can be written in it."""
    folder = Path(folder)
    probe = folder / f".accel-write-test-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(
            f"cannot write to the offload folder {str(folder)!r} ({error.strerror or error}): "
            f"pass offload_folder=<a folder you can write to, on a disk with room for the "
            f"offloaded weights>"
        ) from None
