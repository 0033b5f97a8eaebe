"""Finding the files of a checkpoint, checking them before loading, and ``load_state_dict``.

A checkpoint is a single ``.safetensors``/``.bin``/``.pt``/``.pth`` file, a folder holding one,
or a sharded checkpoint described by an ``*.index.json`` (``{"weight_map": {key: shard}}``),
given as the index file or its folder.
"""

from __future__ import annotations

import difflib
import json
import os
import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from accel_bigmodel.device_map import device_for
from accel_bigmodel.safetensors_io import CheckpointError, open_safetensors

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


@dataclass
class CheckpointFiles:
    """The shard files of a checkpoint in load order, and the index's key -> file map if any."""

    files: list[Path]
    weight_map: dict[str, Path] = field(default_factory=dict)
    index: Path | None = None  # the *.index.json the files come from, if any


def _from_index(index_file: Path) -> CheckpointFiles:
    try:
        index = json.loads(index_file.read_text())
        # {"weight_map": {name: shard}}, or the bare {name: shard} mapping (Accelerate reads both)
        weight_map = index.get("weight_map", index) if isinstance(index, dict) else index
        if not isinstance(weight_map, dict) or not all(
            isinstance(shard, str) for shard in weight_map.values()
        ):
            raise TypeError("not a mapping of tensor names to shard file names")
    except (OSError, json.JSONDecodeError, TypeError) as error:
        raise CheckpointError(
            f"{index_file} is not a checkpoint index: expected JSON with a 'weight_map' object "
            f"(or the bare object) mapping tensor names to shard files "
            f"({type(error).__name__}: {error})"
        ) from None
    folder = index_file.parent
    resolved = {key: folder / shard for key, shard in weight_map.items()}
    exists = {path: path.is_file() for path in set(resolved.values())}
    missing: dict[Path, list[str]] = {}
    for key, path in resolved.items():
        if not exists[path]:
            missing.setdefault(path, []).append(key)
    if missing:
        details = "; ".join(
            f"{path.name} (needed for {len(keys)} keys, e.g. {keys[0]!r})"
            for path, keys in missing.items()
        )
        raise CheckpointError(
            f"the index {index_file} refers to shard files that are missing from {folder}: "
            f"{details}. Copy the missing shards next to the index or save the checkpoint again."
        )
    files = list(dict.fromkeys(resolved.values()))
    return CheckpointFiles(files, resolved, index_file)


def find_checkpoint_files(checkpoint: str | os.PathLike) -> CheckpointFiles:
    """The files to load for ``checkpoint`` (a file, a folder or an index file)."""
    path = Path(checkpoint)
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    if path.is_file():
        if path.name.endswith(".index.json"):
            return _from_index(path)
        if path.suffix in WEIGHT_SUFFIXES:
            return CheckpointFiles([path])
        raise CheckpointError(
            f"cannot load {path}: expected a file ending in {', '.join(WEIGHT_SUFFIXES)} or "
            f".index.json, or a folder holding one"
        )
    indexes = sorted(path.glob("*.index.json"))
    if len(indexes) > 1:
        safe = [i for i in indexes if i.name.endswith(".safetensors.index.json")]
        indexes = safe if len(safe) == 1 else indexes
    if len(indexes) == 1:
        return _from_index(indexes[0])
    if len(indexes) > 1:
        raise CheckpointError(
            f"{path} holds several indexes {[i.name for i in indexes]}: pass the one to load"
        )
    weights = sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    safe = [p for p in weights if p.suffix == ".safetensors"]
    chosen = safe or weights
    if len(chosen) == 1:
        return CheckpointFiles(chosen)
    if not chosen:
        raise CheckpointError(
            f"no checkpoint found in {path}: expected a *.index.json or one weights file ending "
            f"in {', '.join(WEIGHT_SUFFIXES)}; it holds "
            f"{sorted(p.name for p in path.iterdir())[:10]}"
        )
    raise CheckpointError(
        f"{path} holds several weight files {[p.name for p in chosen][:5]} and no index: pass "
        f"the file to load, or the *.index.json of a sharded checkpoint"
    )


def load_torch_file(path: Path) -> dict[str, torch.Tensor]:
    """``torch.load`` of a ``.bin``/``.pt`` state dict, memory-mapped when the format allows.

    Always ``weights_only=True``: a file whose pickle asks for anything but tensors and plain
    containers is refused, and the error says which global was refused.
    """
    try:
        try:
            loaded = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        except RuntimeError:  # legacy (non-zip) format: no memory map
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        refused = _REFUSED_GLOBAL.search(str(error))
        if isinstance(error, pickle.UnpicklingError) and refused:
            raise CheckpointError(
                f"cannot load {path}: torch.load(weights_only=True) refused to unpickle "
                f"{refused.group(1)}: weights_only blocks it, since unpickling it could run "
                f"code. accel loads only tensors and plain containers from pickles; if you "
                f"trust the file's source, re-save its tensors with safetensors or torch.save"
            ) from None
        raise CheckpointError(
            f"cannot load {path} with torch.load ({_first_line(error)}); the file is truncated "
            f"or corrupt, or is not a torch.save state dict: save or download it again"
        ) from None
    if (
        isinstance(loaded, Mapping)
        and "state_dict" in loaded
        and isinstance(loaded["state_dict"], Mapping)
    ):
        loaded = loaded["state_dict"]
    if not isinstance(loaded, Mapping):
        raise CheckpointError(f"{path} does not hold a state dict (found {type(loaded).__name__})")
    return dict(loaded)


# how torch names what weights_only refused: "... unsupported GLOBAL posix.system whose ..."
_REFUSED_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def load_state_dict(
    checkpoint_file: str | os.PathLike, device_map: Mapping[str, object] | None = None
) -> dict[str, torch.Tensor]:
    """Load one checkpoint file. Safetensors tensors are memory-mapped (nothing is copied).

    With ``device_map``, tensors mapped to a GPU are loaded there; the others stay on the CPU.
    """
    from safetensors import safe_open

    path = Path(checkpoint_file)
    if path.suffix == ".safetensors":
        header = open_safetensors(path)
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            result = {key: handle.get_tensor(key) for key in header.entries}
    else:
        result = load_torch_file(path)
    if device_map:
        for key, tensor in result.items():
            device = device_for(key, device_map)
            if isinstance(device, int):
                result[key] = tensor.to(torch.device("cuda", device))
    return result


def mismatch_message(
    checkpoint: str | os.PathLike,
    missing: list[str],
    unexpected: list[str],
    model_keys: list[str],
    advice: str,
) -> str:
    """A message listing missing and unexpected names with their closest matches, then ``advice``
    (what happened or what to do; it depends on whether the caller raises or warns)."""
    lines = [f"the checkpoint {checkpoint} does not fit the model."]
    if missing:
        lines.append(f"{len(missing)} tensors of the model are missing from the checkpoint:")
        for name in missing[:10]:
            close = difflib.get_close_matches(name, unexpected, n=1, cutoff=0.5)
            lines.append(f"  {name}" + (f"  (closest in checkpoint: {close[0]})" if close else ""))
    if unexpected:
        lines.append(f"{len(unexpected)} names in the checkpoint are not in the model:")
        for name in unexpected[:10]:
            close = difflib.get_close_matches(name, model_keys, n=1, cutoff=0.5)
            lines.append(f"  {name}" + (f"  (closest in model: {close[0]})" if close else ""))
    lines.append(advice)
    return "\n".join(lines)
