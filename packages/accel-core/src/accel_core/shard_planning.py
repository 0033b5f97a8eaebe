"""Which tensors of a state dict go to which checkpoint file, and sizes such as ``"10GB"``.

The plan is the one transformers and Hugging Face Accelerate make, so the files load with either:
tensors are taken in the state dict's order and added to the current shard until the next one
would take it past ``max_shard_size``; a tensor larger than ``max_shard_size`` gets a shard of its
own (larger than the limit), numbered before the shard being filled when it comes. Tensors that
share storage with one already placed (tied weights kept in a ``torch.save`` checkpoint) go to
that tensor's shard and count once, since ``torch.save`` writes a storage once. One shard is named
``model.safetensors`` (``pytorch_model.bin``); several are named
``model-00001-of-00003.safetensors`` ... and listed in ``model.safetensors.index.json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from accel_ops import sizes


def parse_size(size: int | str) -> int:
    """``size`` in bytes: ints pass through; ``"10GB"`` is ``10 * 10**9``, ``"5GiB"`` ``5 * 2**30``.

    The rules are :func:`accel_ops.sizes.parse_size`'s, with units case-insensitive as in
    ``Accelerator.save_model`` and transformers' ``max_shard_size`` (``"5gb"`` is five gigabytes,
    not bits), and a unit required (``"10"`` and floats are refused, as before). Raises
    ``ValueError`` for anything else or a size below 1.
    """
    unitless = isinstance(size, str) and size.strip().replace(".", "", 1).isdigit()
    if isinstance(size, float) or unitless:
        raise ValueError(f"max_shard_size={size!r} is not a size: expected {sizes.ACCEPTED}.")
    value = sizes.parse_size(size, name="max_shard_size", bits=False)
    if value < 1:
        raise ValueError(
            f"max_shard_size={size!r} must be at least 1 byte: expected {sizes.ACCEPTED}."
        )
    return value


@dataclass(frozen=True)
class WeightsFormat:
    """The file names of one checkpoint format, and whether its files hold whole storages."""

    stem: str
    suffix: str
    #: ``torch.save`` writes the whole storage of a tensor (a view costs its base's bytes);
    #: safetensors writes the tensor's own bytes.
    writes_whole_storage: bool

    @property
    def single_name(self) -> str:
        """The name of a checkpoint of one file: ``model.safetensors``."""
        return f"{self.stem}{self.suffix}"

    @property
    def index_name(self) -> str:
        """The name of the index of a sharded checkpoint: ``model.safetensors.index.json``."""
        return f"{self.single_name}.index.json"

    def shard_name(self, number: int, count: int) -> str:
        """The name of shard ``number`` (from 1) of ``count``: ``model-00001-of-00003...``."""
        return f"{self.stem}-{number:05d}-of-{count:05d}{self.suffix}"

    def is_weights_file(self, filename: str) -> bool:
        """Whether ``filename`` is a name this format's checkpoints use (single, shard, index)."""
        if filename in (self.single_name, self.index_name):
            return True
        shard = re.escape(self.stem) + r"-\d{5}-of-\d{5}" + re.escape(self.suffix)
        return re.fullmatch(shard, filename) is not None


SAFETENSORS = WeightsFormat("model", ".safetensors", writes_whole_storage=False)
PICKLE = WeightsFormat("pytorch_model", ".bin", writes_whole_storage=True)


@dataclass(frozen=True)
class ShardPlan:
    """File name -> the state-dict names it holds (in order), and the bytes of tensor data."""

    files: dict[str, list[str]]
    total_size: int

    @property
    def is_sharded(self) -> bool:
        """Whether the checkpoint has several files (and so an index)."""
        return len(self.files) > 1

    def weight_map(self) -> dict[str, str]:
        """Each state-dict name -> the file holding it."""
        return {name: file for file, names in self.files.items() for name in names}

    def index(self) -> dict[str, Any]:
        """The content of the index file: ``{"metadata": {"total_size"}, "weight_map"}``."""
        return {"metadata": {"total_size": self.total_size}, "weight_map": self.weight_map()}


def storage_key(tensor: torch.Tensor) -> tuple[torch.device, int, int]:
    """What identifies the memory of ``tensor``: its device, storage address and storage bytes."""
    storage = tensor.untyped_storage()
    return (tensor.device, storage.data_ptr(), storage.nbytes())


def plan_shards(
    state_dict: Mapping[str, Any], max_shard_size: int, weights_format: WeightsFormat
) -> ShardPlan:
    """Split ``state_dict`` into files of at most ``max_shard_size`` bytes of tensor data.

    Values that are not tensors (only ``torch.save`` can write them) count 0 bytes and stay
    with the tensors around them.
    """
    shards: list[list[str]] = []
    current: list[str] = []
    current_size = 0
    total_size = 0
    shard_of_storage: dict[tuple[torch.device, int, int], list[str]] = {}
    for name, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            current.append(name)
            continue
        key = storage_key(value)
        if weights_format.writes_whole_storage and key in shard_of_storage:
            shard_of_storage[key].append(name)  # written with the first tensor of its storage
            continue
        if weights_format.writes_whole_storage:
            size = key[2]
        else:
            size = value.numel() * value.element_size()
        total_size += size
        if size > max_shard_size:
            own = [name]
            shards.append(own)  # the shard being filled goes on after it
        else:
            if current and current_size + size > max_shard_size:
                shards.append(current)
                current, current_size = [], 0
            current.append(name)
            current_size += size
            own = current
        shard_of_storage.setdefault(key, own)
    if current or not shards:
        shards.append(current)
    if len(shards) == 1:
        return ShardPlan({weights_format.single_name: shards[0]}, total_size)
    count = len(shards)
    files = {weights_format.shard_name(i + 1, count): names for i, names in enumerate(shards)}
    return ShardPlan(files, total_size)
