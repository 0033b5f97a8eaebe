"""Sharding a model with FSDP2 (``torch.distributed.fsdp.fully_shard``) as a plugin says.

The plugin's auto-wrap policy picks the sub-modules that become their own FSDP unit (transformer
layer classes, modules above a size, or none); each is sharded bottom-up, then the root, so every
parameter ends up in exactly one unit. Containers (``ModuleList``, ``ModuleDict``) are never a
unit of their own: torch shards only modules with a forward. ``reshard_after_forward``, the
mixed-precision policy, the offload policy and the ignored modules come from the plugin; so do
activation checkpointing (applied first) and ``cpu_ram_efficient_loading`` (shard on the meta
device, then fill from process 0). CPU offload on a CPU run is accepted and changes nothing:
the parameters are in CPU memory already (:func:`_offload_policy`).
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING

import torch

from accel_backends.fsdp.activation_checkpointing import (
    CONTAINERS,
    canonical_name,
    checkpoint_layers,
    innermost,
    is_wrapped_inner,
)
from accel_backends.fsdp.full_load import (
    load_full_state_dict,
    non_persistent_buffers,
    put_back_buffers,
)
from accel_backends.fsdp.helpers import fsdp2_prepare_auto_wrap_policy, get_parameters_from_modules
from accel_core.module_inspection import get_module_children_bottom_up
from accel_core.strategies.parameters import ParameterMap

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import OffloadPolicy

    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin

logger = logging.getLogger(__name__)


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
        options["offload_policy"] = _offload_policy(plugin.cpu_offload, mesh)
    return options


def _offload_policy(policy: OffloadPolicy, mesh: DeviceMesh) -> OffloadPolicy:
    """``policy``, without pinned memory when the mesh is on CPU.

    Pinning needs an accelerator (torch raises "Cannot access accelerator device" without one),
    and on a CPU run it would buy nothing: FSDP2 keeps the offloaded shards in CPU memory and
    copies them to the compute device, which is the CPU itself, so offloading moves nothing
    and the run is the same as without it.
    """
    from torch.distributed.fsdp import CPUOffloadPolicy

    if isinstance(policy, CPUOffloadPolicy) and policy.pin_memory and mesh.device_type == "cpu":
        logger.info("cpu_offload on a CPU run: parameters are in CPU memory already (unpinned)")
        return CPUOffloadPolicy(pin_memory=False)
    return policy


def shard_model(
    model: torch.nn.Module,
    plugin: FullyShardedDataParallelPlugin,
    mesh: DeviceMesh,
    device: torch.device,
    *,
    upcast_to_fp32: bool = False,
) -> list[str]:
    """Apply ``fully_shard`` to ``model`` in place: the units the policy picks, then the root.

    In order, as in Accelerate: with ``plugin.activation_checkpointing`` the layers the policy
    picks are wrapped in activation checkpointing (:mod:`accel_backends.
    fsdp.activation_checkpointing`; a wrapper is sharded as the unit of the layer it holds, so the
    units are the same either way); with ``upcast_to_fp32`` (mixed precision) trainable
    parameters of other dtypes become float32, the master weights FSDP2's mixed-precision policy
    casts from; with ``plugin.cpu_ram_efficient_loading`` the model is sharded on the meta
    device and filled from process 0's weights (:mod:`accel_backends.fsdp.full_load`).
    Returns the qualified names of the sub-modules sharded as their own unit (the root, ``""``,
    last). The model keeps its identity; its class becomes torch's ``FSDP<Class>``.
    """
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, fully_shard

    if plugin.activation_checkpointing:
        checkpoint_layers(model, plugin)
    if upcast_to_fp32:
        upcast_trainable_to_fp32(model)
    from_rank0 = bool(plugin.cpu_ram_efficient_loading)
    if from_rank0:
        full = model.state_dict() if dist.get_rank() == 0 else {}
        buffers = non_persistent_buffers(model)
        model.to(torch.device("meta"))
        tie_weights_again(model)
    options = fully_shard_options(plugin, mesh)
    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
    units: list[str] = []
    if policy is not None:
        for name, child in get_module_children_bottom_up(model, return_fqns=True)[:-1]:
            if isinstance(child, CONTAINERS) or not any(True for _ in child.parameters()):
                continue  # torch refuses containers without a forward; nothing to shard
            if is_wrapped_inner(name):
                continue  # its checkpoint wrapper is the unit
            if isinstance(child, FSDPModule):
                continue  # a unit already (an experts module, over the processes holding it)
            if policy(innermost(child)):
                fully_shard(child, **options)
                units.append(name)
    ignored = get_parameters_from_modules(plugin.ignored_modules, model, device)
    fully_shard(model, **options, ignored_params=ignored or None)
    units.append("")
    if from_rank0:
        offloaded = isinstance(plugin.cpu_offload, CPUOffloadPolicy)
        load_full_state_dict(model, full, device=device, cpu_offload=offloaded)
        put_back_buffers(model, buffers, device)
        tie_weights_again(model)
    return units


def upcast_trainable_to_fp32(model: torch.nn.Module) -> None:
    """Make trainable parameters of other dtypes float32: the master weights that FSDP's
    mixed-precision policies cast from (as Accelerate does)."""
    for parameter in model.parameters():
        if parameter.requires_grad and parameter.dtype != torch.float32:
            parameter.data = parameter.data.to(torch.float32)


def has_meta_tensors(model: torch.nn.Module) -> bool:
    """Whether a parameter or buffer of ``model`` is on the meta device."""
    return any(p.is_meta for p in model.parameters()) or any(b.is_meta for b in model.buffers())


def tie_weights_again(model: torch.nn.Module) -> None:
    """Tie again what a transformers model ties (moving to meta and loading both untie)."""
    tie = getattr(model, "tie_weights", None)
    if callable(tie):
        tie()


def match_renamed_parameters(
    before: list[tuple[str, torch.nn.Parameter]], model: torch.nn.Module
) -> ParameterMap:
    """The parameters of the sharded ``model`` that replaced those of ``before`` (the names
    before sharding), matched by their names without activation checkpointing's parts."""
    after = {canonical_name(name): p for name, p in model.named_parameters()}
    replaced: ParameterMap = {}
    for name, old in before:
        new = after.get(canonical_name(name))
        if new is not None and new is not old:
            replaced[id(old)] = (weakref.ref(old), weakref.ref(new))
    return replaced
