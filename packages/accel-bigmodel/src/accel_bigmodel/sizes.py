"""How many bytes each module of a model takes, in its own dtypes or in a target dtype."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from accel_bigmodel.dtypes import CustomDtype, dtype_byte_size, parse_dtype


def named_module_tensors(
    module: nn.Module,
    include_buffers: bool = True,
    recurse: bool = False,
    remove_non_persistent: bool = False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` for the parameters (and buffers) of ``module``.

    ``recurse=False`` keeps to the module's own tensors. ``remove_non_persistent`` drops buffers
    registered with ``persistent=False`` (they are not in the state dict), nested ones included.
    """
    yield from module.named_parameters(recurse=recurse)
    if not include_buffers:
        return
    skipped: set[str] = set()
    if remove_non_persistent:
        skipped = get_non_persistent_buffers(module, recurse=recurse, fqns=True)
    for name, buffer in module.named_buffers(recurse=recurse):
        if name not in skipped:
            yield name, buffer


def get_non_persistent_buffers(
    module: nn.Module, recurse: bool = False, fqns: bool = False
) -> set[str]:
    """Names of the buffers of ``module`` registered with ``persistent=False``.

    ``recurse`` adds those of every submodule: by their own short names, or with ``fqns`` by
    their dotted names from ``module`` (``"encoder.rotary.inv_freq"``).
    """
    names = set(module._non_persistent_buffers_set)
    if recurse:
        for prefix, sub in module.named_modules():
            if fqns:
                names |= {f"{prefix}.{b}" if prefix else b for b in sub._non_persistent_buffers_set}
            else:
                names |= sub._non_persistent_buffers_set
    return names


def id_tensor_storage(tensor: torch.Tensor) -> tuple[torch.device, int, int]:
    """A key identifying the storage behind ``tensor``: two views of one storage share it.

    Returns ``(device, storage id, storage size in bytes)``. Meta tensors have no storage address,
    so they are told apart by the identity of the tensor object.
    """
    if tensor.device.type == "meta":
        return tensor.device, id(tensor), tensor.nelement() * tensor.element_size()
    storage = tensor.untyped_storage()
    return tensor.device, storage.data_ptr(), storage.nbytes()


def _tensor_bytes(
    name: str,
    tensor: torch.Tensor,
    dtype: torch.dtype | None,
    special_dtypes: dict[str, torch.dtype | CustomDtype],
) -> int:
    """Bytes of ``tensor`` once loaded: integer and bool tensors are never cast (as in loading)."""
    if name in special_dtypes:
        size = dtype_byte_size(special_dtypes[name])
    elif dtype is not None and not _keeps_dtype(tensor.dtype):
        size = min(dtype_byte_size(dtype), dtype_byte_size(tensor.dtype))
    else:
        size = dtype_byte_size(tensor.dtype)
    return int(tensor.numel() * size)


def _keeps_dtype(dtype: torch.dtype) -> bool:
    return dtype == torch.bool or not (dtype.is_floating_point or dtype.is_complex)


def compute_module_sizes(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype | CustomDtype] | None = None,
    buffers_only: bool = False,
) -> dict[str, int]:
    """Bytes of every tensor, of every module holding tensors and of the whole model (``""``).

    With ``dtype``, floating-point tensors are counted as if cast to it (never upcast: a float16
    weight stays two bytes under ``dtype=float32``, as when loading); integer and bool tensors
    keep their size. ``special_dtypes`` maps tensor names to the dtype they will have. Tied
    tensors count once, under their first name. The result is a ``defaultdict(int)`` whose keys
    come in Accelerate's order (each tensor and its parents, parameters first, then buffers), so
    a module without tensors reads as 0. Works on the meta device.
    """
    target = parse_dtype(dtype)
    special = {
        k: v if isinstance(v, CustomDtype) else parse_dtype(v)
        for k, v in (special_dtypes or {}).items()
    }
    sizes: defaultdict[str, int] = defaultdict(int)
    tensors = model.named_buffers() if buffers_only else named_module_tensors(model, recurse=True)
    for name, tensor in tensors:
        size = _tensor_bytes(name, tensor, target, special)
        parts = name.split(".")
        for end in range(len(parts) + 1):
            sizes[".".join(parts[:end])] += size
    return sizes


def compute_module_total_buffer_size(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype | CustomDtype] | None = None,
) -> int:
    """Bytes taken by all the buffers of ``model``."""
    return compute_module_sizes(model, dtype, special_dtypes, buffers_only=True).get("", 0)


def get_max_layer_size(
    modules: Sequence[tuple[str, nn.Module | torch.Tensor]],
    module_sizes: dict[str, int],
    no_split_module_classes: list[str] | None,
) -> tuple[int, list[str]]:
    """The size of the biggest layer among ``modules`` and the names of the layers of that size.

    A layer is a module without children or a module whose class is in
    ``no_split_module_classes``: the unit that is loaded at once when offloaded weights run.
    """
    no_split = set(no_split_module_classes or ())
    max_size = 0
    names: list[str] = []
    queue = list(modules)
    while queue:
        name, module = queue.pop(0)
        children = list(module.named_children()) if isinstance(module, nn.Module) else []
        if not children or type(module).__name__ in no_split:
            size = module_sizes.get(name, 0)
            if size > max_size:
                max_size, names = size, [name]
            elif size == max_size:
                names.append(name)
        else:
            queue = [(f"{name}.{n}" if name else n, m) for n, m in children] + queue
    return max_size, names


def calculate_maximum_sizes(model: nn.Module) -> tuple[int, tuple[int, list[str]]]:
    """``(total bytes, (bytes of the biggest layer, its names))`` of ``model``.

    Uses the model's ``_no_split_modules`` (set by transformers models) to define layers.
    """
    sizes = compute_module_sizes(model)
    no_split = list(getattr(model, "_no_split_modules", None) or [])
    return sizes[""], get_max_layer_size(top_level_entries(model), sizes, no_split)


def top_level_entries(model: nn.Module) -> list[tuple[str, nn.Module | torch.Tensor]]:
    """The model's own parameters, then its children, then its own buffers: the units that
    ``infer_auto_device_map`` starts placing, in Accelerate's order."""
    return [
        *model.named_parameters(recurse=False),
        *model.named_children(),
        *model.named_buffers(recurse=False),
    ]
