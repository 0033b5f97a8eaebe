"""``infer_auto_device_map``: place a model's modules on GPUs, then the CPU, then the disk.

The algorithm is Accelerate's, so a map computed here is the map Accelerate computes for the
same model and ``max_memory`` (the parity tests compare both on many budgets):

1. The units to place start as the model's own parameters, its children, then its own buffers,
   in definition order. Devices are taken in order: GPU indices, ``"mps"``, ``"cpu"``, then
   ``"disk"`` (always present, unlimited).
2. The *main devices* (the first GPU and the CPU; ``"mps"`` alone on a Mac; the CPU without
   accelerators) always keep room for the biggest layer still to place (a module without
   children or of a ``no_split_module_classes`` class): offloaded weights are brought there to
   run.
3. A unit goes on the current device if it fits together with the units holding the other
   names of its tied parameters, which go with it. If only the unit itself fits, the first
   splittable tied unit is replaced by its parts and the step is retried.
4. A unit that does not fit is replaced by its parts (own parameters, children, own buffers)
   unless it has no children or its class is in ``no_split_module_classes``; then, with
   ``fallback_allocation`` and the device still empty, the first later unit that fits (searched
   depth first, see ``fallback_allocate``) is placed there first; otherwise the next device is
   taken and the unit retried there.

Where Accelerate's arithmetic places something wrongly this module does not follow it, and the
tests pin each such case: the own buffers of a module that gets split are placed (in
Accelerate they get no device and the map fails its own ``check_device_map``); a tied unit is
counted once even when several tied names sit in it; the size with ties never subtracts a
tied tensor the current unit does not hold; a tensor is inside a unit when its name has the
unit's name as a dotted prefix (Accelerate tests for a substring, so ``"0"`` contains
``"10.weight"``, and then fails with an IndexError).
"""

from __future__ import annotations

import logging
import math
import warnings

import torch
from torch import nn

from accel_bigmodel.memory import Device, get_max_memory
from accel_bigmodel.placement_units import (
    Entry,
    clean_device_map,
    fallback_allocate,
    holds,
    size_with_tied_units,
    split_parts,
    splittable,
    tied_outside,
)
from accel_bigmodel.sizes import (
    compute_module_sizes,
    compute_module_total_buffer_size,
    get_max_layer_size,
    top_level_entries,
)
from accel_bigmodel.tied import check_tied_parameters_in_config, find_tied_parameters

logger = logging.getLogger(__name__)


def infer_auto_device_map(
    model: nn.Module,
    max_memory: dict[Device, int | str] | None = None,
    no_split_module_classes: list[str] | str | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    verbose: bool = False,
    clean_result: bool = True,
    offload_buffers: bool = False,
    fallback_allocation: bool = False,
) -> dict[str, Device]:
    """A device map for ``model`` under ``max_memory``: GPUs first, then the CPU, then the disk.

    Follows Accelerate's algorithm (see the module docstring), so the maps are the ones
    Accelerate computes. Needs no GPU and no weights: only sizes and dtypes are read, so the model
    may be on the meta device and ``max_memory={0: "10GiB", 1: "10GiB", "cpu": "30GiB"}`` may name
    GPUs this machine does not have. ``dtype`` and ``special_dtypes`` give the dtypes the weights
    will be loaded in. ``offload_buffers`` only changes the warning given when the buffers of
    offloaded modules may not fit on a GPU. Returns a plain ``dict[str, int | str]``; with
    ``clean_result`` the keys of a module whose parts all share a device are merged into one.
    """
    allocator = _Allocator(
        model,
        get_max_memory(max_memory),
        _as_list(no_split_module_classes),
        dtype,
        special_dtypes,
        verbose,
    )
    device_map = allocator.run(fallback_allocation, offload_buffers)
    if clean_result:
        device_map = clean_device_map(device_map)
    allocator.warn_about_buffers(offload_buffers)
    return device_map


def _as_list(classes: list[str] | str | None) -> list[str]:
    if classes is None:
        return []
    return [classes] if isinstance(classes, str) else list(classes)


class _Allocator:
    """The state of one ``infer_auto_device_map`` run: units left, device in use, bytes used."""

    def __init__(
        self,
        model: nn.Module,
        memory: dict[Device, int],
        no_split: list[str],
        dtype: str | torch.dtype | None,
        special_dtypes: dict[str, str | torch.dtype] | None,
        verbose: bool,
    ) -> None:
        self.memory = memory
        self.devices: list[Device] = list(memory) + ([] if "disk" in memory else ["disk"])
        self.accelerators = [d for d in self.devices if d not in ("cpu", "disk")]
        if "mps" in self.accelerators:
            self.main_devices: list[Device] = ["mps"]
        elif self.accelerators:
            self.main_devices = [self.accelerators[0], "cpu"]
        else:
            self.main_devices = ["cpu"]
        self.no_split = no_split
        self.dtype = dtype
        self.special_dtypes = special_dtypes
        self.verbose = verbose
        self.sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
        self.tied = find_tied_parameters(model)
        if check_tied_parameters_in_config(model) and not self.tied:
            logger.warning(
                "the model's config ties weights but no parameters are tied: call "
                "model.tie_weights() before infer_auto_device_map"
            )
        self.queue: list[Entry] = top_level_entries(model)
        self.layer_size, self.layer_names = get_max_layer_size(self.queue, self.sizes, no_split)
        self.current = 0
        self.used: dict[Device, int] = dict.fromkeys(self.devices, 0)
        self.buffer_sizes: dict[Device, int] = {}
        self.left_empty: dict[Device, int] = {}

    def _say(self, message: str) -> None:
        if self.verbose:
            print(message)

    def _update_biggest_layer(self, popped: str | None = None) -> None:
        """Recompute the biggest layer still to place once the last one named is gone."""
        if popped is not None:
            self.layer_names = [n for n in self.layer_names if not holds(popped, n)]
            if self.layer_names:
                return
        modules = [(n, m) for n, m in self.queue if isinstance(m, nn.Module)]
        self.layer_size, self.layer_names = get_max_layer_size(modules, self.sizes, self.no_split)

    def run(self, fallback_allocation: bool, offload_buffers: bool) -> dict[str, Device]:
        device_map: dict[str, Device] = {}
        while self.queue:
            name, unit = self.queue.pop(0)
            self._update_biggest_layer(popped=name)
            size = self.sizes.get(name, 0)
            outside = tied_outside(name, self.tied)
            device = self.devices[self.current]
            reserved = self.layer_size if device in self.main_devices else 0
            limit = math.inf if device == "disk" else self.memory[device] - reserved
            with_ties, tied_names, tied_units = size_with_tied_units(
                outside, size, self.sizes, self.queue
            )
            used = self.used[device]
            if used + with_ties <= limit:
                self._say(f"{name} and {tied_names} ({with_ties} bytes) -> {device!r}")
                self._place(device_map, name, unit, tied_names, with_ties, device, offload_buffers)
                continue
            if (
                outside
                and used + size <= limit
                and self._split_tied(name, unit, tied_names, tied_units)
            ):
                continue
            if used + size >= limit and splittable(unit, self.no_split):
                self._say(f"{name} ({size} bytes) does not fit on {device!r}: splitting it")
                self.queue = split_parts(name, unit) + self.queue
                self._update_biggest_layer()
                continue
            if fallback_allocation and used == 0 and device != "disk":
                room = self.memory[device] - max(self.layer_size, with_ties)
                found, found_unit, rest = fallback_allocate(
                    self.queue, self.sizes, room, self.no_split, self.tied
                )
                if found is not None and found_unit is not None:
                    self.queue = [(found, found_unit), (name, unit), *rest]
                    continue
            if used == 0:
                self.left_empty[device] = with_ties + reserved
            self._say(f"{name} ({with_ties} bytes) does not fit on {device!r}: next device")
            self.used[device] = used + reserved
            self.current += 1
            self.queue.insert(0, (name, unit))
        if self.left_empty:
            needs = "\n".join(f"  - {d}: {b} bytes required" for d, b in self.left_empty.items())
            logger.info(  # formatted, with Accelerate's words first, as its record is
                "Based on the current allocation process, no modules could be assigned to the "
                f"following devices due to insufficient memory:\n{needs}\nEach device is too "
                "small for the next module: raise its max_memory to at least that much."
            )
        return device_map

    def _place(
        self,
        device_map: dict[str, Device],
        name: str,
        unit: nn.Module | torch.Tensor,
        tied_names: list[str],
        size: int,
        device: Device,
        offload_buffers: bool,
    ) -> None:
        self.used[device] += size
        device_map[name] = device
        for tied_name in tied_names:
            names = [n for n, _ in self.queue]
            if tied_name in names:
                self.queue.pop(names.index(tied_name))
            device_map[tied_name] = device
        if not offload_buffers and isinstance(unit, nn.Module):
            buffers = compute_module_total_buffer_size(unit, self.dtype, self.special_dtypes)
            self.buffer_sizes[device] = self.buffer_sizes.get(device, 0) + buffers

    def _split_tied(
        self,
        name: str,
        unit: nn.Module | torch.Tensor,
        tied_names: list[str],
        tied_units: list[nn.Module | torch.Tensor],
    ) -> bool:
        """Replace the first splittable tied unit by its parts; False if none can be split."""
        for tied_name, tied_unit in zip(tied_names, tied_units, strict=True):
            if not splittable(tied_unit, self.no_split):
                continue
            self._say(f"{name} fits but not with {tied_names}: splitting {tied_name}")
            index = [n for n, _ in self.queue].index(tied_name)
            parts = split_parts(tied_name, tied_unit)
            self.queue = [(name, unit), *self.queue[:index], *parts, *self.queue[index + 1 :]]
            self._update_biggest_layer()
            return True
        return False

    def warn_about_buffers(self, offload_buffers: bool) -> None:
        """Warn when the buffers of offloaded modules fit on no GPU next to its modules."""
        offloaded = self.buffer_sizes.get("cpu", 0) + self.buffer_sizes.get("disk", 0)
        if offload_buffers or offloaded == 0 or not self.accelerators:
            return
        for device in self.accelerators:
            if self.memory.get(device, 0) >= offloaded + self.used.get(device, 0):
                return
        warnings.warn(
            f"the buffers of the offloaded modules take {offloaded} bytes, more than any GPU "
            f"has left; if you run out of memory, pass offload_buffers=True",
            stacklevel=3,
        )
