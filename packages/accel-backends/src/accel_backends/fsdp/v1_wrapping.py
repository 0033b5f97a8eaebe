"""Wrapping a model in FSDP1 (``torch.distributed.fsdp.FullyShardedDataParallel``) as a plugin says.

What Hugging Face Accelerate 1.15 passes to ``FullyShardedDataParallel`` for ``fsdp_version=1``,
taken from the plugin: the sharding strategy (``FULL_SHARD``, ``SHARD_GRAD_OP``, ``NO_SHARD``,
``HYBRID_SHARD``, ``HYBRID_SHARD_ZERO2``), the auto-wrap policy bound to the model (transformer
layer classes, size, none), the ``MixedPrecision`` policy, ``CPUOffload``, backward and forward
prefetch, ``limit_all_gathers``, ``use_orig_params``, ``sync_module_states`` with its
``param_init_fn`` (``cpu_ram_efficient_loading``: process 0's weights are broadcast, the others
may hold meta tensors) and the ignored modules. As in Accelerate, trainable parameters become
float32 under mixed precision (the master weights ``MixedPrecision`` casts from), and activation
checkpointing is applied after wrapping, inside the FSDP units, to the layers the policy picks.

FSDP1 gets a device mesh instead of a process group, so its sharded state dicts hold
``DTensor``s as FSDP2's do: the strategy's one-dimensional mesh of every process, or for the
hybrid strategies a two-dimensional one (replicas across nodes, shards within a node, as torch
does without a mesh; or the ``ParallelismConfig``'s ``dp_replicate`` x ``dp_shard``).

Differences from torch's on a CPU run (no accelerator): ``CPUOffload(offload_params=True)``
changes nothing there, since the parameters are in CPU memory already, and is dropped (torch
would try to pin memory); ``sync_module_states``, which torch refuses for CPU tensors, is done
here before wrapping: meta tensors are materialised on the CPU, then every parameter and buffer
is broadcast from process 0.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from typing import TYPE_CHECKING

import torch

from accel_backends.fsdp.activation_checkpointing import CONTAINERS
from accel_backends.fsdp.helpers import fsdp2_prepare_auto_wrap_policy, get_parameters_from_modules
from accel_backends.fsdp.sharding import (
    has_meta_tensors,
    tie_weights_again,
    upcast_trainable_to_fp32,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin

logger = logging.getLogger(__name__)


def sharding_strategy_of(plugin: FullyShardedDataParallelPlugin) -> ShardingStrategy:
    """The plugin's FSDP1 sharding strategy (``sharding_strategy``, else a strategy given as
    ``reshard_after_forward``, else ``FULL_SHARD``), as Accelerate reads it."""
    from torch.distributed.fsdp import ShardingStrategy

    for value in (plugin.sharding_strategy, plugin.reshard_after_forward):
        if isinstance(value, ShardingStrategy):
            return value
    return ShardingStrategy.FULL_SHARD


def is_hybrid(strategy: ShardingStrategy) -> bool:
    """Whether ``strategy`` shards within a group and replicates across groups."""
    from torch.distributed.fsdp import ShardingStrategy

    return strategy in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2)


def fsdp1_mesh(
    plugin: FullyShardedDataParallelPlugin,
    shard_mesh: DeviceMesh,
    config_mesh: DeviceMesh | None,
    num_processes: int,
) -> DeviceMesh:
    """The mesh ``FullyShardedDataParallel`` gets (a collective when it builds one).

    Raises:
        ValueError: a ``ParallelismConfig`` with ``dp_replicate_size > 1`` and a strategy that
            doesn't replicate (only the hybrid ones use a replica dimension), or a hybrid
            strategy whose groups don't divide the processes.
    """
    from torch.distributed.device_mesh import init_device_mesh

    strategy = sharding_strategy_of(plugin)
    if not is_hybrid(strategy):
        if shard_mesh.ndim != 1:
            raise ValueError(
                f"FSDP1's {strategy.name} shards over every process of one group, but the "
                f"ParallelismConfig asks for {shard_mesh.size(0)} replicas: use "
                "sharding_strategy HYBRID_SHARD (or HYBRID_SHARD_ZERO2), or fsdp_version 2."
            )
        return shard_mesh
    if shard_mesh.ndim == 2:
        return shard_mesh
    if config_mesh is not None:
        names = config_mesh.mesh_dim_names or ()
        if "dp_replicate" in names and "dp_shard" in names:
            return config_mesh["dp_replicate", "dp_shard"]
    local = min(num_processes, int(os.environ.get("LOCAL_WORLD_SIZE", num_processes)))
    if local < 1 or num_processes % local:
        raise ValueError(
            f"FSDP1's {strategy.name} shards within each node and replicates across nodes, but "
            f"{num_processes} processes don't divide into nodes of LOCAL_WORLD_SIZE={local}."
        )
    return init_device_mesh(
        shard_mesh.device_type,
        (num_processes // local, local),
        mesh_dim_names=("dp_replicate", "dp_shard"),
    )


def wrap_model(
    model: torch.nn.Module,
    plugin: FullyShardedDataParallelPlugin,
    mesh: DeviceMesh,
    device: torch.device,
    *,
    upcast_to_fp32: bool = False,
) -> FullyShardedDataParallel:
    """``model`` in ``FullyShardedDataParallel`` as ``plugin`` says (see the module docstring).

    The plugin's auto-wrap policy is bound to ``model`` first (``set_auto_wrap_policy``; a
    transformer layer class name not in the model is a ``ValueError``). The model's modules keep
    their identity; with ``use_orig_params`` its parameters become views into the shards.
    """
    from torch.distributed.fsdp import CPUOffload, MixedPrecision
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    checkpointed = _checkpointed_layers(model, plugin)
    if upcast_to_fp32:
        upcast_trainable_to_fp32(model)
    plugin.set_auto_wrap_policy(model)
    offload = plugin.cpu_offload if isinstance(plugin.cpu_offload, CPUOffload) else None
    if offload is not None and offload.offload_params and device.type == "cpu":
        logger.info("cpu_offload on a CPU run: parameters are in CPU memory already")
        offload = None
    mixed = plugin.mixed_precision_policy
    ignored = get_parameters_from_modules(plugin.ignored_modules, model, device)
    sync = bool(plugin.sync_module_states)
    if sync and device.type == "cpu":
        broadcast_from_rank0(model, device)
        sync = False
    wrapped = FSDP(
        model,
        sharding_strategy=sharding_strategy_of(plugin),
        cpu_offload=offload,
        auto_wrap_policy=plugin.auto_wrap_policy,
        mixed_precision=mixed if isinstance(mixed, MixedPrecision) else None,
        sync_module_states=sync,
        backward_prefetch=plugin.backward_prefetch,
        forward_prefetch=bool(plugin.forward_prefetch),
        limit_all_gathers=plugin.limit_all_gathers,
        use_orig_params=bool(plugin.use_orig_params),
        param_init_fn=plugin.param_init_fn if sync else None,
        ignored_states=ignored or None,
        device_id=device,
        device_mesh=mesh,
    )
    if checkpointed:
        _checkpoint(wrapped, checkpointed)
    return wrapped


def broadcast_from_rank0(model: torch.nn.Module, device: torch.device) -> None:
    """Give every process process 0's parameters and buffers (a collective), materialising
    meta tensors on ``device`` first (weights tied by the model are tied again)."""
    import itertools

    import torch.distributed as dist

    if has_meta_tensors(model):
        model.to_empty(device=device)
        tie_weights_again(model)
    with torch.no_grad():
        for tensor in itertools.chain(model.parameters(), model.buffers()):
            dist.broadcast(tensor.data, src=0)


def _checkpointed_layers(
    model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin
) -> set[int]:
    """The modules (by id) activation checkpointing wraps: those the plugin's policy picks,
    decided before FSDP1 moves their parameters into flat ones (after which a size-based policy
    would count nothing). The model itself and containers never are (as for FSDP2)."""
    if not plugin.activation_checkpointing:
        return set()
    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
    if policy is None:
        return set()
    return {
        id(module)
        for name, module in model.named_modules()
        if name and not isinstance(module, CONTAINERS) and policy(module)
    }


def _checkpoint(wrapped: torch.nn.Module, layers: set[int]) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    apply_activation_checkpointing(
        wrapped,
        checkpoint_wrapper_fn=functools.partial(
            checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT
        ),
        check_fn=lambda module: id(module) in layers,
    )


def point_at_flat_parameters(
    optimizer: torch.optim.Optimizer, flat_parameters: list[torch.nn.Parameter]
) -> None:
    """Re-point ``optimizer``, in place, at FSDP1's flat parameters (``use_orig_params=False``).

    A flat parameter holds many of the model's parameters, so the optimizer gets one parameter
    group with its constructor's settings (``defaults``), as Accelerate rebuilds it; with
    several groups that merges them, and a warning names what is lost. The object stays, so a
    scheduler built on it keeps working; any state it had is dropped (it was for the old
    tensors).
    """
    groups = optimizer.param_groups
    if len(groups) > 1:
        warnings.warn(
            f"FSDP1 with use_orig_params=False flattens parameters: the optimizer's {len(groups)} "
            "parameter groups become one with the optimizer's defaults "
            f"({_settings(optimizer.defaults)}). Set use_orig_params=True (fsdp_use_orig_params: "
            "true) to keep them.",
            stacklevel=3,
        )
    group = dict(optimizer.defaults)
    if "initial_lr" in groups[0]:  # set by a scheduler built before prepare
        group["initial_lr"] = groups[0]["initial_lr"]
    optimizer.state.clear()
    groups.clear()
    optimizer.add_param_group({**group, "params": flat_parameters})


def _settings(defaults: dict[str, object]) -> str:
    shown = ("lr", "weight_decay")
    return ", ".join(f"{key}={defaults[key]}" for key in shown if key in defaults) or "none"


def state_dict_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module torch's state-dict functions take: FSDP1's outermost wrapper, else the model
    inside the prepared one (which FSDP2 sharded in place)."""
    from accel_core.unwrap import extract_model_from_parallel

    root = state_dict_root(model)
    return root if root is not None else extract_model_from_parallel(model)


def state_dict_root(model: torch.nn.Module) -> torch.nn.Module | None:
    """The outermost ``FullyShardedDataParallel`` of a prepared model (inside ``torch.compile``),
    which FSDP1's state-dict functions and ``no_sync`` need; ``None`` if it has none."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    module = getattr(model, "_orig_mod", model)
    return module if isinstance(module, FSDP) else None
