"""State dicts of models whose weights are offloaded (to the CPU or disk, behind hooks).

A dispatched or ``cpu_offload``-ed model keeps its offloaded weights on the meta device between
forward passes, so ``model.state_dict()`` would return empty tensors. These functions bring the
weights of one module at a time onto a device (as a forward pass does), read them, and put the
module back, so at most one module's offloaded weights are loaded at a time besides the result.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import torch
from torch import nn

from accel_bigmodel.memory import Device
from accel_bigmodel.tensors import align_module_device, has_offloaded_params

logger = logging.getLogger(__name__)


def _own_state(module: nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    """The module's own parameters and persistent buffers, as ``state_dict`` names them."""
    destination: OrderedDict[str, torch.Tensor] = OrderedDict()
    module._save_to_state_dict(destination, prefix, keep_vars=False)
    return dict(destination)


def get_state_dict_offloaded_model(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full state dict of ``model``, on the CPU, offloaded weights included.

    Every module with offloaded weights is onloaded to the CPU in turn, read, and offloaded
    again; other tensors are copied to the CPU. Keys and order are those of ``model.state_dict()``
    (the model's own root tensors included). A tensor still on the meta device afterwards (never
    loaded) is left out, with a warning naming it. Raises MemoryError if a module's weights do
    not fit in CPU memory.
    """
    state: dict[str, torch.Tensor] = {}
    order: dict[str, None] = {}  # every key in state-dict order, the first time it is seen
    on_meta: list[str] = []
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        offloaded = has_offloaded_params(module)
        try:
            with align_module_device(module, "cpu" if offloaded else None):
                # An offloaded module's hook may hold its submodules' weights too.
                if offloaded:
                    tensors = module.state_dict(prefix=prefix)
                else:
                    tensors = _own_state(module, prefix)
                for key, tensor in tensors.items():
                    order.setdefault(key)
                    if tensor.device.type == "meta":
                        on_meta.append(key)
                    else:
                        state[key] = tensor.to("cpu")
        except MemoryError:
            raise MemoryError(
                f"the offloaded weights of module {name!r} do not fit in CPU memory, which "
                "get_state_dict_offloaded_model needs to read them"
            ) from None
    missing = [key for key in dict.fromkeys(on_meta) if key not in state]
    if missing:
        logger.warning("these tensors are on the meta device and were not saved: %s", missing)
    return {key: state[key] for key in order if key in state}


def get_state_dict_from_offload(
    module: nn.Module,
    module_name: str,
    state_dict: dict[str, torch.Tensor | str],
    device_to_put_offload: Device | torch.device = "cpu",
) -> dict[str, torch.Tensor | str]:
    """Fill ``state_dict`` with the tensors of ``module``, onloaded if they are offloaded.

    ``module_name`` is the dotted name of one of the module's tensors (``"layers.0.weight"``):
    its part before the last dot is the module's prefix in ``state_dict``. Every key of the
    module's state dict that ``state_dict`` already has is replaced by the tensor, brought onto
    ``device_to_put_offload`` when the module's weights are offloaded (left where they are
    otherwise). Returns ``state_dict``.
    """
    prefix = module_name.rpartition(".")[0]
    device = device_to_put_offload if has_offloaded_params(module) else None
    with align_module_device(module, device):
        for key, tensor in module.state_dict().items():
            full = f"{prefix}.{key}" if prefix else key
            if full in state_dict:
                state_dict[full] = tensor
    return state_dict
