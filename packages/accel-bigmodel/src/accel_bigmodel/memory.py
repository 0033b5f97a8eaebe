"""How much memory each device offers: ``get_max_memory`` and ``get_balanced_memory``."""

from __future__ import annotations

import re
from collections.abc import Mapping

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
    As in Accelerate, the sizes given as strings are also converted in the caller's dict (its keys
    stay as they were), once every entry has been checked; transformers relies on it.
    """
    if max_memory is None:
        found: dict[Device, int] = {}
        if torch.cuda.is_available():
            for index in range(torch.cuda.device_count()):
                found[index] = torch.cuda.mem_get_info(index)[0]
        import psutil  # 8 ms: only when the memory is asked for (transformers imports this module)

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
    for key, value in list(max_memory.items()):
        if isinstance(value, str):
            max_memory[key] = result[normalize_device(key, where="a key of max_memory")]
    return dict(sorted(result.items(), key=lambda item: device_order(item[0])))


def check_device_same(first_device: torch.device, second_device: torch.device) -> bool:
    """Whether two torch devices are the same device, ``cuda`` meaning ``cuda:0``.

    ``torch.device("cuda") == torch.device("cuda:0")`` is False in torch; here an accelerator
    device without an index is read as index 0. Devices of different types always differ.
    """
    if first_device.type != second_device.type:
        return False
    if first_device.type == "cpu":
        return True
    return (first_device.index or 0) == (second_device.index or 0)


def get_module_leaves(module_sizes: Mapping[str, int]) -> list[str]:
    """The names in ``module_sizes`` (as from ``compute_module_sizes``) that no other name
    extends by one dotted part, ``""`` excepted: the tensors, or once tensors are removed, the
    innermost modules holding them."""
    parents = {name.rpartition(".")[0] for name in module_sizes if "." in name}
    return [name for name in module_sizes if name and name not in parents]


def get_balanced_memory(
    model: nn.Module,
    max_memory: dict[Device, int | str] | None = None,
    no_split_module_classes: list[str] | str | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    low_zero: bool = False,
) -> dict[Device, int]:
    """A ``max_memory`` that spreads the model evenly over the GPUs, for ``infer_auto_device_map``.

    Accelerate's rule, so ``device_map="auto"`` gives the same maps: with n GPUs (those with
    memory left), each GPU but the last is capped at ``model size // n`` plus a margin of 1.25
    times the bigger of the first ``no_split_module_classes`` block met and the mean size of the
    innermost modules holding tensors; the last GPU keeps its full memory, so everything that fits
    somewhere still does. With ``low_zero`` the size is shared by n - 1 GPUs and GPU 0 receives
    only what the others cannot hold (it is kept free for generation outputs). With a single GPU
    whose memory was measured (``max_memory=None``), 90% of it is offered, the rest kept as a
    buffer. CPU, mps (unless it is the accelerator) and disk are returned unchanged.
    """
    measured = max_memory is None
    memory = get_max_memory(max_memory)
    gpus = [d for d in memory if _is_accelerator(d) and memory[d] > 0]
    if not gpus:
        return memory
    if len(gpus) == 1:
        low_zero = False
        if measured and isinstance(gpus[0], int):
            memory[gpus[0]] = int(memory[gpus[0]] * 0.9)
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    margin = max(
        _no_split_block_size(model, sizes, no_split_module_classes), _mean_innermost_size(sizes)
    )
    per_gpu = sizes[""] // (len(gpus) - 1 if low_zero else len(gpus)) + int(1.25 * margin)
    int_gpus = [g for g in gpus if isinstance(g, int)]
    for gpu in int_gpus[:-1]:
        if not (low_zero and gpu == int_gpus[0]):
            memory[gpu] = min(per_gpu, memory[gpu])
    if low_zero and int_gpus:
        rest = sum(memory[g] for g in int_gpus[1:])
        memory[int_gpus[0]] = min(max(0, sizes[""] - rest), memory[int_gpus[0]])
    return memory


def _is_accelerator(device: Device) -> bool:
    if isinstance(device, int):
        return True
    return device == "mps" and not torch.cuda.is_available() and torch.backends.mps.is_available()


def _no_split_block_size(
    model: nn.Module, sizes: Mapping[str, int], no_split_module_classes: list[str] | str | None
) -> int:
    """Size of the biggest of the first modules met (in ``sizes`` order) of each no-split class."""
    if isinstance(no_split_module_classes, str):
        no_split_module_classes = [no_split_module_classes]
    wanted = set(no_split_module_classes or ())
    first: dict[str, int] = {}
    modules = dict(model.named_modules())
    for name, size in sizes.items():
        module = modules.get(name) if name else None
        class_name = type(module).__name__
        if module is not None and class_name in wanted and class_name not in first:
            first[class_name] = size
    return max(first.values(), default=0)


def _mean_innermost_size(sizes: Mapping[str, int]) -> int:
    """Mean size of the innermost modules that hold tensors (the leaves once tensors are gone)."""
    tensors = set(get_module_leaves(sizes))
    modules = {n: v for n, v in sizes.items() if n not in tensors}
    leaves = get_module_leaves(modules)
    return int(sum(modules[n] for n in leaves) / max(len(leaves), 1))
