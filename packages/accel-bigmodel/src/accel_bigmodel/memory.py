"""How much memory each device offers: ``get_max_memory`` and ``get_balanced_memory``."""

from __future__ import annotations

import re

import psutil
import torch
from torch import nn

from accel_bigmodel.dtypes import convert_file_size_to_int
from accel_bigmodel.sizes import compute_module_sizes

Device = int | str

_CUDA_NAME = re.compile(r"^cuda:(\d+)$")
_NAMED_DEVICES = ("mps", "cpu", "disk")


def normalize_device(device: object, where: str = "") -> Device:
    """A device as a device map holds it: a GPU index (int), ``"cpu"``, ``"mps"``, ``"disk"``.

    Accepts ints, ``"cuda"``, ``"cuda:N"``, digit strings and ``torch.device``. Anything else is a
    ValueError naming ``where`` the value came from and the valid choices.
    """
    if isinstance(device, torch.device):
        device = str(device)
    if isinstance(device, bool):
        pass
    elif isinstance(device, int) and device >= 0:
        return device
    elif isinstance(device, str):
        if device in _NAMED_DEVICES or device == "meta":
            return device
        if device == "cuda":
            return 0
        match = _CUDA_NAME.match(device)
        if match:
            return int(match.group(1))
        if device.isdigit():
            return int(device)
    place = f" for {where}" if where else ""
    raise ValueError(
        f"unknown device {device!r}{place}: expected a GPU index (0, 1, ...), 'cuda:N', "
        f"'cpu', 'mps' or 'disk'"
    )


def device_order(device: Device) -> tuple[int, int]:
    """Sort key: GPUs by index, then mps, cpu, disk."""
    if isinstance(device, int):
        return (0, device)
    return (1, ("mps", "cpu", "disk", "meta").index(device))


def get_max_memory(max_memory: dict[Device, int | str] | None = None) -> dict[Device, int]:
    """Bytes available on each device, GPUs first (by index), then ``"mps"``, ``"cpu"``, ``"disk"``.

    Without ``max_memory``: the free memory of every visible GPU (``torch.cuda.mem_get_info``) and
    the available RAM (``psutil``). With it: the values given, as ints or strings such as "10GiB"
    or "500MB". Giving GPU indices needs no GPU: it is how maps for other machines are computed.
    """
    if max_memory is None:
        found: dict[Device, int] = {}
        if torch.cuda.is_available():
            for index in range(torch.cuda.device_count()):
                found[index] = torch.cuda.mem_get_info(index)[0]
        found["cpu"] = psutil.virtual_memory().available
        return found
    if not isinstance(max_memory, dict):
        raise TypeError(
            f"max_memory must be a dict such as {{0: '10GiB', 'cpu': '30GiB'}}, got {max_memory!r}"
        )
    result: dict[Device, int] = {}
    for key, value in max_memory.items():
        device = normalize_device(key, where="a key of max_memory")
        if device == "meta":
            raise ValueError("max_memory cannot have a 'meta' entry: meta tensors take no memory")
        try:
            result[device] = convert_file_size_to_int(value)
        except ValueError as error:
            raise ValueError(f"max_memory[{key!r}]: {error}") from None
    return dict(sorted(result.items(), key=lambda item: device_order(item[0])))


def get_balanced_memory(
    model: nn.Module,
    max_memory: dict[Device, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    low_zero: bool = False,
) -> dict[Device, int]:
    """A ``max_memory`` that spreads the model evenly over the GPUs, for ``infer_auto_device_map``.

    With n GPUs each of the first n - 1 is capped at ``ceil(model size / n)``; the last GPU keeps
    its full memory, so a layer that does not fit before a boundary moves to the next GPU and
    everything that fits somewhere still does. With ``low_zero`` GPU 0 receives only what the
    other GPUs cannot hold (it is kept free for generation outputs) and the rest is spread over
    GPUs 1..n-1. With fewer than two GPUs the memory is returned unchanged.
    """
    memory = get_max_memory(max_memory)
    gpus = [d for d in memory if isinstance(d, int) and memory[d] > 0]
    if len(gpus) < 2:
        return memory
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    sharing = gpus[1:] if low_zero else gpus
    per_gpu = -(-sizes[""] // len(sharing))
    for gpu in sharing[:-1]:
        memory[gpu] = min(memory[gpu], per_gpu)
    if low_zero:
        rest = sum(memory[g] for g in sharing)
        memory[gpus[0]] = min(memory[gpus[0]], max(0, sizes[""] - rest))
    return memory
