"""Sharding a model with FSDP2 (``torch.distributed.fsdp.fully_shard``) as a plugin says.

The plugin's auto-wrap policy picks the sub-modules that become their own FSDP unit (transformer
layer classes, modules above a size, or none); each is sharded bottom-up, then the root, so every
parameter ends up in exactly one unit. Containers (``ModuleList``, ``ModuleDict``) are never a
unit of their own: torch shards only modules with a forward. ``reshard_after_forward``, the
mixed-precision policy, the offload policy and the ignored modules come from the plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from accel_backends.fsdp_helpers import fsdp2_prepare_auto_wrap_policy, get_parameters_from_modules
from accel_core.module_inspection import get_module_children_bottom_up

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from accel_backends.fsdp_plugin import FullyShardedDataParallelPlugin


#: Modules ``fully_shard`` refuses (they have no forward of their own).
_CONTAINERS = (torch.nn.ModuleList, torch.nn.ModuleDict)


def fully_shard_options(
    plugin: FullyShardedDataParallelPlugin, mesh: DeviceMesh
) -> dict[str, object]:
    """The keyword arguments of ``fully_shard`` that every unit of the model gets."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, OffloadPolicy

    options: dict[str, object] = {
        "mesh": mesh,
        "reshard_after_forward": bool(plugin.reshard_after_forward),
    }
    if isinstance(plugin.mixed_precision_policy, MixedPrecisionPolicy):
        options["mp_policy"] = plugin.mixed_precision_policy
    if isinstance(plugin.cpu_offload, OffloadPolicy):
        options["offload_policy"] = plugin.cpu_offload
    return options


def shard_model(
    model: torch.nn.Module,
    plugin: FullyShardedDataParallelPlugin,
    mesh: DeviceMesh,
    device: torch.device,
) -> list[str]:
    """Apply ``fully_shard`` to ``model`` in place: the units the policy picks, then the root.

    Returns the qualified names of the sub-modules sharded as their own unit (the root, ``""``,
    last). The model keeps its identity; its class becomes torch's ``FSDP<Class>``.
    """
    from torch.distributed.fsdp import fully_shard

    options = fully_shard_options(plugin, mesh)
    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
    units: list[str] = []
    if policy is not None:
        for name, child in get_module_children_bottom_up(model, return_fqns=True)[:-1]:
            if isinstance(child, _CONTAINERS) or not any(True for _ in child.parameters()):
                continue  # torch refuses containers without a forward; nothing to shard
            if policy(child):
                fully_shard(child, **options)
                units.append(name)
    ignored = get_parameters_from_modules(plugin.ignored_modules, model, device)
    fully_shard(model, **options, ignored_params=ignored or None)
    units.append("")
    return units
