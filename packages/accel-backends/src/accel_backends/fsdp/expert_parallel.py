"""Expert parallelism under the ``fsdp`` strategy: what ``prepare`` does with ``ep_size > 1``.

After a tensor-parallel split (which leaves the experts alone), the experts modules are split
over the mesh's ``ep`` dimension (:mod:`accel_backends.expert_split`) and each becomes an FSDP2
unit of its own over the processes that hold the same experts (``dp_shard_mod_ep``, with
``dp_replicate``: :func:`~accel_backends.expert_parallel_mesh.expert_shard_mesh`); the rest of
the model is then sharded over ``dp_shard`` as without ``ep``.

Gradients: a process's expert gradient sums what every process of its ``ep`` group sent it
(the all-to-all's backward), so over the loss of ``ep_size`` processes; FSDP then sums over the
processes holding the same experts and divides by their number. The split scales each local
gradient by ``1 / ep_size`` on its way back (:mod:`accel_backends.expert_split`), so an expert's
gradient is the average over every data-parallel process, as a non-expert's is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_backends.expert_parallel_config import ExpertParallelConfig
from accel_backends.expert_parallel_mesh import expert_shard_mesh
from accel_backends.expert_split import check_experts_divide, find_experts, split_experts
from accel_backends.fsdp.sharding import fully_shard_options
from accel_core.out_of_scope import OutOfScopeError

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin


def expert_parallel_size(config: object) -> int:
    """``config.ep_size`` (1 without one)."""
    return int(getattr(config, "ep_size", None) or 1)


def refuse_unsupported_expert_parallel(
    config: object, plugin: FullyShardedDataParallelPlugin
) -> None:
    """Raise ``OutOfScopeError`` for what expert parallelism does not compose with here:
    pipeline stages, context parallelism, loading the weights from process 0. Runs before the
    model is changed."""
    size = expert_parallel_size(config)
    others = {
        "pp_size": int(getattr(config, "pp_size", None) or 1),
        "cp_size": int(getattr(config, "cp_size", None) or 1),
    }
    for key, other in others.items():
        if other > 1:
            raise OutOfScopeError(
                f"ParallelismConfig(ep_size={size}, {key}={other}): expert parallelism composes "
                f"with dp_replicate, dp_shard and tp here, not with {key.removesuffix('_size')}; "
                f"set {key}=1 or ep_size=1"
            )
    if plugin.cpu_ram_efficient_loading:
        raise ValueError(
            "cpu_ram_efficient_loading (fsdp_cpu_ram_efficient_loading) can't be used with "
            f"expert parallelism (ep_size={size}): each process keeps its own experts of the "
            "model it was given; turn it off"
        )


def expert_modules(model: torch.nn.Module, config: object) -> list[tuple[str, torch.nn.Module]]:
    """The experts modules of ``model`` (``config.ep_handler``, or the default search), checked
    against ``ep_size`` before anything changes; empty without ``ep_size > 1``."""
    size = expert_parallel_size(config)
    if size == 1:
        return []
    handler = getattr(config, "ep_handler", None) or ExpertParallelConfig()
    found = find_experts(model, handler)
    check_experts_divide(found, size)
    return found


def shard_experts(
    found: list[tuple[str, torch.nn.Module]],
    mesh: DeviceMesh,
    plugin: FullyShardedDataParallelPlugin,
) -> None:
    """Split ``found`` over ``mesh["ep"]`` and make each an FSDP2 unit over the processes that
    hold the same experts (their gradients averaged over every data-parallel process: see the
    module docstring)."""
    from torch.distributed.fsdp import fully_shard

    split_experts(found, mesh["ep"])
    options = fully_shard_options(plugin, expert_shard_mesh(mesh))
    for _, module in found:
        fully_shard(module, **options)
