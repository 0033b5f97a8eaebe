"""Device maps: which device holds each tensor, their checks, and the strategy names.

``infer_auto_device_map`` itself lives in ``auto_map``.

A device map is a plain ``dict[str, int | str]`` from module (or tensor) names to a GPU index,
``"cpu"``, ``"mps"`` or ``"disk"``; the key ``""`` is the whole model. A tensor belongs to the
longest key that is a prefix of its name.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping

import torch
from torch import nn

from accel_bigmodel.auto_map import infer_auto_device_map
from accel_bigmodel.memory import Device, get_balanced_memory, normalize_device
from accel_bigmodel.sizes import named_module_tensors

STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def device_for(name: str, device_map: Mapping[str, object]) -> object:
    """The device that ``device_map`` gives the tensor or module ``name`` (longest prefix key)."""
    prefix = name
    while True:
        if prefix in device_map:
            return device_map[prefix]
        if not prefix:
            raise KeyError(name)
        cut = prefix.rfind(".")
        prefix = prefix[:cut] if cut > 0 else ""


def check_device_map(model: nn.Module, device_map: Mapping[str, object]) -> None:
    """Raise a ValueError if ``device_map`` has unknown devices or misses some tensor.

    A name that is no module or tensor of the model is a warning, as in Accelerate (maps that
    worked there keep working); it places nothing.
    """
    modules = {n for n, _ in model.named_modules()}
    tensor_names = [n for n, _ in named_module_tensors(model, recurse=True)]
    known = modules | set(tensor_names)
    unknown = []
    for key, value in device_map.items():
        normalize_device(value, where=f"module {key!r} in device_map")
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            unknown.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    if unknown:
        warnings.warn(
            "The following device_map keys do not match any submodules in the model: "
            f"{', '.join(unknown)}; they place nothing",
            UserWarning,
            stacklevel=2,
        )
    missing = []
    for name in tensor_names:
        try:
            device_for(name, device_map)
        except KeyError:
            missing.append(name)
    if missing:
        raise ValueError(
            "The device_map provided does not give any device for the following parameters: "
            f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} ({len(missing)} "
            "tensors); add their modules (or '' for the whole model) to the map"
        )


def placing_entries(model: nn.Module, device_map: Mapping[str, Device]) -> dict[str, Device]:
    """``device_map`` without the names that are no module or tensor of ``model`` (which
    :func:`check_device_map` warns about): what is left is what places something."""
    known = {n for n, _ in model.named_modules()}
    known.update(n for n, _ in named_module_tensors(model, recurse=True))
    return {key: device for key, device in device_map.items() if key in known}


def resolve_device_map(
    model: nn.Module,
    device_map: str | Mapping[str, object] | None,
    max_memory: dict[Device, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    dtype: str | torch.dtype | None = None,
    offload_buffers: bool = False,
) -> dict[str, Device] | None:
    """Turn a strategy name ("auto", "balanced", "balanced_low_0", "sequential") into a map.

    "auto" and "balanced" spread the model evenly over the GPUs, "balanced_low_0" keeps GPU 0 as
    empty as possible, "sequential" fills each GPU before moving to the next. A dict is checked
    and normalised (``"cuda:1"`` -> ``1``); None stays None.
    """
    if device_map is None:
        return None
    if isinstance(device_map, str):
        if device_map not in STRATEGIES:
            raise ValueError(
                f"unknown device_map strategy {device_map!r}: expected one of {list(STRATEGIES)} "
                f"or a dict such as {{'': 'cpu'}}"
            )
        if device_map != "sequential":
            max_memory = get_balanced_memory(
                model,
                max_memory,
                no_split_module_classes=no_split_module_classes,
                dtype=dtype,
                low_zero=device_map == "balanced_low_0",
            )
        return infer_auto_device_map(
            model,
            max_memory=max_memory,
            no_split_module_classes=no_split_module_classes,
            dtype=dtype,
            offload_buffers=offload_buffers,
        )
    if not isinstance(device_map, Mapping):
        raise TypeError(f"device_map must be a dict or a strategy name, got {device_map!r}")
    return {
        k: normalize_device(v, where=f"module {k!r} in device_map") for k, v in device_map.items()
    }
