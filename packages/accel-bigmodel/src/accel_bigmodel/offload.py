"""Offloaded weights on disk in Accelerate's format, and mappings that read them lazily.

On disk an offload folder holds ``index.json`` and one raw ``<name>.dat`` file per tensor. Each
index entry is either ``{"dtype": "float32", "shape": [4, 4]}`` for a ``.dat`` file (bfloat16 is
stored as int16 bytes, a 0-d tensor as one element) or a reference to a tensor that already sits
in a safetensors file, ``{"safetensors_file": path, "weight_name": key, "dtype": ...}``, for which
nothing is written. Hugging Face Accelerate reads and writes the same layout.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from accel_bigmodel.dtypes import dtype_name, parse_dtype
from accel_bigmodel.safetensors_io import (
    CheckpointError,
    SafetensorsFile,
    _byte_view,
    open_safetensors,
)

INDEX_NAME = "index.json"


def _write_atomic(path: Path, payload: memoryview | bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "wb") as handle:
            handle.write(payload)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def offload_weight(
    weight: torch.Tensor,
    weight_name: str,
    offload_folder: str | os.PathLike,
    index: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Write ``weight`` to ``<offload_folder>/<weight_name>.dat`` and record it in ``index``.

    Returns the index (a new dict if none is given). The file appears complete or not at all.
    """
    weight = weight.detach().to("cpu").contiguous()
    dtype = dtype_name(weight.dtype)
    index = {} if index is None else index
    index[weight_name] = {"dtype": dtype, "shape": list(weight.shape)}
    folder = Path(offload_folder)
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomic(folder / f"{weight_name}.dat", _byte_view(weight.reshape(-1)))
    return index


def load_offloaded_weight(
    weight_file: str | os.PathLike, weight_info: Mapping[str, Any]
) -> torch.Tensor:
    """Map a ``.dat`` file written by ``offload_weight`` back as a CPU tensor (no copy)."""
    dtype = parse_dtype(weight_info["dtype"])
    shape = tuple(weight_info["shape"])
    numel = 1
    for dim in shape:
        numel *= dim
    expected = numel * dtype.itemsize
    try:
        count = os.path.getsize(weight_file)
    except OSError as error:
        raise CheckpointError(f"cannot read offloaded weight {weight_file}: {error}") from None
    if count != expected:
        raise CheckpointError(
            f"offloaded weight {weight_file} has {count} bytes, expected {expected} for shape "
            f"{list(shape)} and dtype {weight_info['dtype']}; the offload folder is damaged, "
            f"delete it and load the checkpoint again"
        )
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.from_file(str(weight_file), shared=False, size=numel, dtype=dtype).view(shape)


def read_index_entry(
    folder: str | os.PathLike | None,
    key: str,
    info: Mapping[str, Any],
    open_file: Callable[[str], SafetensorsFile] = open_safetensors,
) -> torch.Tensor:
    """Read the tensor an offload index entry describes (a ``.dat`` file or a safetensors key;
    ``open_file`` gives the safetensors file of a path)."""
    if info.get("safetensors_file") is not None:
        tensor = open_file(info["safetensors_file"]).map(info.get("weight_name", key))
        wanted = parse_dtype(info["dtype"]) if info.get("dtype") else None
        return tensor if wanted is None or tensor.dtype == wanted else tensor.to(wanted)
    if folder is None:
        raise ValueError(f"the offload index entry for {key!r} needs an offload folder")
    return load_offloaded_weight(Path(folder) / f"{key}.dat", info)


def save_offload_index(index: dict[str, dict[str, Any]], offload_folder: str | os.PathLike) -> None:
    """Merge ``index`` into ``<offload_folder>/index.json`` (written atomically)."""
    if not index:
        return
    path = Path(offload_folder) / INDEX_NAME
    current: dict[str, Any] = {}
    if path.exists():
        current = json.loads(path.read_text())
    current.update(index)
    _write_atomic(path, json.dumps(current, indent=2).encode())


def offload_state_dict(save_dir: str | os.PathLike, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Write every tensor of ``state_dict`` to ``save_dir`` with its index."""
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    index: dict[str, dict[str, Any]] = {}
    for name, tensor in state_dict.items():
        offload_weight(tensor, name, save_dir, index=index)
    save_offload_index(index, save_dir)


class PrefixedDataset(Mapping):
    """The view of ``dataset`` under ``prefix``: ``view["w"]`` is ``dataset[prefix + "w"]``."""

    def __init__(self, dataset: Mapping[str, Any], prefix: str) -> None:
        self.dataset = dataset
        self.prefix = prefix

    def __getitem__(self, key: str) -> Any:
        return self.dataset[f"{self.prefix}{key}"]

    def advise(self, key: str) -> None:
        """Forward a read-ahead hint to the underlying mapping, if it takes them."""
        advise = getattr(self.dataset, "advise", None)
        if advise is not None:
            advise(f"{self.prefix}{key}")

    def release(self, key: str) -> None:
        """Forward "done with this tensor for now" to the underlying mapping, if it takes it."""
        release = getattr(self.dataset, "release", None)
        if release is not None:
            release(f"{self.prefix}{key}")

    def __iter__(self) -> Iterator[str]:
        return iter([k for k in self.dataset if k.startswith(self.prefix)])

    def __len__(self) -> int:
        return len(self.dataset)


class OffloadedWeightsLoader(Mapping):
    """A read-only mapping over weights kept in memory (``state_dict``) or in an offload folder.

    Offloaded tensors are read on each access (see ``index.json`` entries in the module
    docstring); ``device`` moves them there after reading. A tensor in a safetensors file is a
    view of the file's memory map, made once per file: an offloaded model asks for every weight
    on every forward, so nothing but the view is made per access, and :meth:`release` gives the
    pages back once the module has run.
    """

    def __init__(
        self,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        save_folder: str | os.PathLike | None = None,
        index: Mapping[str, Any] | None = None,
        device: int | str | torch.device | None = None,
    ) -> None:
        if state_dict is None and save_folder is None and index is None:
            raise ValueError("OffloadedWeightsLoader needs a state_dict, a save_folder or an index")
        self.state_dict = dict(state_dict or {})
        self.save_folder = save_folder
        if index is None and save_folder is not None:
            path = Path(save_folder) / INDEX_NAME
            index = json.loads(path.read_text()) if path.exists() else {}
        self.index = dict(index or {})
        self.all_keys = list(self.state_dict) + [k for k in self.index if k not in self.state_dict]
        self.device = device
        self._files: dict[str, SafetensorsFile] = {}

    def _file(self, path: str) -> SafetensorsFile:
        """The safetensors file at ``path``, opened (header read, checked) once per loader."""
        file = self._files.get(path)
        if file is None:
            file = self._files[path] = open_safetensors(path)
        return file

    def _in_safetensors(self, key: str) -> tuple[SafetensorsFile, str] | None:
        """The file and tensor name of ``key`` when it references a safetensors file."""
        info = self.index.get(key)
        if info is None or info.get("safetensors_file") is None:
            return None
        return self._file(info["safetensors_file"]), info.get("weight_name", key)

    def __getitem__(self, key: str) -> torch.Tensor:
        if key in self.state_dict:
            return self.state_dict[key]
        if key not in self.index:
            raise KeyError(key)
        tensor = read_index_entry(self.save_folder, key, self.index[key], self._file)
        return tensor if self.device is None else tensor.to(self.device)

    def release(self, key: str) -> None:
        """Give back the memory of ``key``'s mapped pages (they stay in the page cache); call
        once nothing uses the tensor any more. Does nothing for in-memory tensors."""
        if key in self.state_dict:
            return
        found = self._in_safetensors(key)
        if found is not None:
            found[0].release(found[1])

    def advise(self, key: str) -> None:
        """Ask the kernel to start reading ``key``'s bytes from disk now (``MADV_WILLNEED`` on the
        file's map, ``POSIX_FADV_WILLNEED`` for a ``.dat`` file), so a later access does not wait
        for the disk. Does nothing for in-memory tensors."""
        if key in self.state_dict or key not in self.index:
            return
        found = self._in_safetensors(key)
        if found is not None:
            found[0].advise(found[1])
            return
        if self.save_folder is None or not hasattr(os, "posix_fadvise"):
            return
        try:
            fd = os.open(Path(self.save_folder) / f"{key}.dat", os.O_RDONLY)
        except OSError:
            return  # the read itself will report the problem
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)

    def __iter__(self) -> Iterator[str]:
        return iter(self.all_keys)

    def __len__(self) -> int:
        return len(self.all_keys)


def extract_submodules_state_dict(
    state_dict: Mapping[str, torch.Tensor], submodule_names: list[str]
) -> dict[str, torch.Tensor]:
    """The entries of ``state_dict`` under one of ``submodule_names`` ("" is everything)."""
    result = {}
    for name in submodule_names:
        prefix = f"{name}." if name else ""
        for key, value in state_dict.items():
            if key == name or key.startswith(prefix):
                result[key] = value
    return result
