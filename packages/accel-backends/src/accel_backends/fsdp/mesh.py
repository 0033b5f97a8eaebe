"""The device mesh the ``fsdp`` strategy shards over, from the state's ``ParallelismConfig``.

Without a configuration (or with one of size 1 on one process) the strategy shards over a
one-dimensional mesh of every process and ``accelerator.torch_device_mesh`` stays None, as in
Accelerate. With ``dp_shard_size > 1`` it builds the configuration's mesh with Accelerate's names
(dimensions ``dp_replicate`` when > 1, then ``dp_shard``; flattened ``dp``, ``dp_shard_cp`` and
``dp_cp``) and shards over its ``fsdp_dim_names``, as Accelerate's FSDP2 does: ``dp_shard_cp``
alone is FSDP; ``("dp_replicate", "dp_shard_cp")`` is HSDP (on a 2-D mesh ``fully_shard``
replicates over the first dimension and shards over the second).

With ``tp_size > 1`` the mesh has a ``tp`` dimension too (innermost), which the model is split
over before it is sharded over the data-parallel ones (:mod:`accel_backends.tensor_parallel`);
with no data-parallel dimension left (``tp_size`` = the number of processes) nothing is sharded.
``dp_replicate_size > 1`` beside ``tp_size > 1`` and ``dp_shard_size`` 1 keeps a ``dp_shard``
dimension of size 1: HSDP over groups of one, so each copy holds the whole (tensor-parallel)
model and gradients are averaged across copies.

With ``pp_size > 1`` the mesh has a ``pp`` dimension too (outermost): each process holds one
pipeline stage (:mod:`accel_backends.fsdp.pipelining`), sharded over the data-parallel
dimensions of its stage (a ``dp_shard`` dimension of size 1 is kept when there is no other).

A configuration that leaves nothing to shard or split across (``dp_shard_size`` and ``tp_size``
1) on several processes is Accelerate's ``ValueError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from accel_backends.expert_parallel_mesh import DP_SHARD_MOD_EP
from accel_backends.parallelism_config import ParallelismConfig

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from accel_core.parallelism import ParallelismConfigLike


class FSDPMeshes(NamedTuple):
    """The mesh ``fully_shard`` gets (None: nothing to shard over, tensor parallelism alone), the
    configuration's whole mesh (None without one), its ``tp`` dimension and its ``pp`` dimension
    (None without them)."""

    shard: DeviceMesh | None
    config: DeviceMesh | None
    tp: DeviceMesh | None = None
    pp: DeviceMesh | None = None


def _size(config: ParallelismConfigLike, name: str) -> int:
    value = getattr(config, name, None)
    return 1 if value is None else int(value)


def fsdp_meshes(
    config: ParallelismConfigLike | None, device_type: str, num_processes: int
) -> FSDPMeshes:
    """Build the meshes on every process (a collective) for ``config`` (see the module docstring).

    Raises:
        ValueError: ``config`` has ``dp_shard_size`` 1 and ``tp_size`` 1 and the run has several
            processes (FSDP would have no dimension to shard across).
    """
    from torch.distributed.device_mesh import init_device_mesh

    replicas = 1 if config is None else _size(config, "dp_replicate_size")
    shards = 1 if config is None else _size(config, "dp_shard_size")
    tensor = 1 if config is None else _size(config, "tp_size")
    stages = 1 if config is None else _size(config, "pp_size")
    if config is None or (replicas * shards * tensor * stages == 1 and num_processes == 1):
        return FSDPMeshes(init_device_mesh(device_type, (num_processes,)), None)
    if shards == 1 and tensor == 1 and stages == 1:
        raise ValueError(
            "FSDP is enabled but the parallelism config has no dimension for FSDP to shard "
            f"across: ParallelismConfig(dp_replicate_size={replicas}, dp_shard_size={shards}) "
            f"on {num_processes} processes. Set dp_shard_size so that dp_replicate_size x "
            f"dp_shard_size = {num_processes} (dp_shard_size={num_processes}: FSDP over every "
            "process), or leave parallelism_config out."
        )
    if isinstance(config, ParallelismConfig):
        parallel = config
    else:  # an Accelerate-like object: build through ours, from its sizes
        parallel = ParallelismConfig(
            dp_replicate_size=replicas,
            dp_shard_size=shards,
            tp_size=tensor,
            cp_size=_size(config, "cp_size"),
            sp_size=_size(config, "sp_size"),
            pp_size=stages,
            ep_size=_size(config, "ep_size"),
        )
    # copies of a tensor-parallel model, or pipeline stages: HSDP or FSDP over groups of one
    # keeps them whole
    tp_copies = tensor > 1 and replicas > 1
    keep = ("dp_shard",) if (tp_copies or stages > 1) and shards == 1 else ()
    mesh = parallel.device_mesh
    if mesh is None:
        mesh = parallel.build_device_mesh(device_type, keep=keep)
        parallel.device_mesh = mesh
    if parallel is not config and hasattr(config, "device_mesh"):
        config.device_mesh = mesh  # what Accelerate's ParallelismConfig.get_device_mesh returns
    assert mesh is not None
    names = mesh.mesh_dim_names or ()
    dims = [
        *(["dp_replicate"] if "dp_replicate" in names else []),
        # dp_shard is built as dp_shard_mod_ep x dp_shard_in_ep under expert parallelism
        *(["dp_shard_cp"] if {"dp_shard", DP_SHARD_MOD_EP, "cp"} & set(names) else []),
    ]
    shard = mesh[tuple(dims)] if dims else None
    pipeline = mesh["pp"] if stages > 1 else None
    return FSDPMeshes(shard, mesh, mesh["tp"] if tensor > 1 else None, pipeline)
