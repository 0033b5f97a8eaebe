"""Where an offloading hook puts its module's weights for one forward, and takes them back.

An offloaded module gets its weights before every forward and gives them back after it: for a
model offloaded to disk that is every weight, every generated token. ``OffloadSlots`` records,
once, each offloaded tensor's owner module, attribute and meta placeholder, so that emptying the
slots is one assignment per tensor (the placeholder, made once) and filling them is one
assignment of the value as it comes, when it already has the placeholder's shape, dtype and the
execution device. Anything else (a cast, a move, a parameter subclass) goes through
:func:`~accel_bigmodel.tensors.set_module_tensor_to_device`, which also gives the errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from accel_bigmodel.tensors import set_module_tensor_to_device


@dataclass(frozen=True)
class _Slot:
    owner: nn.Module
    attribute: str
    is_buffer: bool
    placeholder: torch.Tensor  # on the meta device


class OffloadSlots:
    """The offloaded tensors of ``module`` (dotted ``names``), put on the meta device now."""

    def __init__(self, module: nn.Module, names: list[str]) -> None:
        self.module = module
        self.slots: dict[str, _Slot] = {}
        for name in names:
            set_module_tensor_to_device(module, name, "meta")
            owner_name, _, attribute = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            is_buffer = attribute in owner._buffers
            table = owner._buffers if is_buffer else owner._parameters
            self.slots[name] = _Slot(owner, attribute, is_buffer, table[attribute])

    def fill(self, values: dict[str, torch.Tensor], device: torch.device | str | int) -> None:
        """Put ``values`` in their slots, on ``device`` (moved or cast only where needed)."""
        target = torch.device(device)
        for name, value in values.items():
            slot = self.slots[name]
            placeholder = slot.placeholder
            if (
                value.device == target
                and value.dtype == placeholder.dtype
                and value.shape == placeholder.shape
            ):
                if slot.is_buffer:
                    slot.owner._buffers[slot.attribute] = value
                    continue
                if type(placeholder) is nn.Parameter:
                    slot.owner._parameters[slot.attribute] = nn.Parameter(
                        value,
                        requires_grad=placeholder.requires_grad and value.is_floating_point(),
                    )
                    continue
            set_module_tensor_to_device(self.module, name, device, value=value)

    def empty(self) -> None:
        """Put every placeholder back (the values are dropped)."""
        for slot in self.slots.values():
            table = slot.owner._buffers if slot.is_buffer else slot.owner._parameters
            table[slot.attribute] = slot.placeholder
