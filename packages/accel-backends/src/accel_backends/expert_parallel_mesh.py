"""The device mesh of expert parallelism (``ParallelismConfig(ep_size=N)``).

As in torchtitan and transformers, ``ep`` borrows its processes from ``dp_shard``: ``ep_size``
divides ``dp_shard_size`` and does not multiply the world size. The mesh then builds ``dp_shard``
as two dimensions, ``dp_shard_mod_ep`` (``dp_shard_size / ep_size``, outer) and
``dp_shard_in_ep`` (``ep_size``, inner: an expert-parallel group is neighbouring ranks), and
flattens them back: ``dp_shard`` (and ``dp``, ``dp_shard_cp``, ``dp_cp`` as without ``ep``) over
both, ``ep`` over ``dp_shard_in_ep``. Every non-expert parameter is sharded over ``dp_shard`` as
without ``ep``; the experts are split over ``ep`` and each rank's share is sharded over
``dp_shard_mod_ep`` (copied over ``dp_replicate``), so an expert's gradient is averaged over
exactly the ranks that hold it (:data:`EXPERT_SHARD_DIMS`).

Torch-free at import: ``ParallelismConfig`` validates sizes without torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: The mesh dimension names expert parallelism adds.
EP_DIM = "ep"
DP_SHARD_MOD_EP = "dp_shard_mod_ep"
DP_SHARD_IN_EP = "dp_shard_in_ep"
#: The dimensions an expert's parameters are sharded (and replicated) over, outermost first:
#: the ranks that hold the same experts.
EXPERT_SHARD_DIMS = ("dp_replicate", DP_SHARD_MOD_EP)


def check_expert_parallel_sizes(ep_size: int, dp_shard_size: int) -> None:
    """Raise ``ValueError`` unless ``ep_size`` divides ``dp_shard_size`` (the processes
    expert parallelism borrows)."""
    if ep_size > 1 and dp_shard_size % ep_size:
        raise ValueError(
            f"ParallelismConfig(ep_size={ep_size}, dp_shard_size={dp_shard_size}): ep_size must "
            "divide dp_shard_size, since expert parallelism runs on the processes of 'dp_shard' "
            f"(it does not add processes of its own); set dp_shard_size to a multiple of "
            f"{ep_size}."
        )


def expert_parallel_mesh_layout(
    names: Sequence[str], sizes: Mapping[str, int], ep_size: int
) -> tuple[tuple[str, ...], tuple[int, ...], dict[str, tuple[str, ...]]]:
    """The dimensions to build for ``names`` (mesh order) of ``sizes``: their names, their
    sizes, and for each of ``names`` the built dimensions it is made of. With ``ep_size`` 1,
    ``names`` unchanged; above 1, ``dp_shard`` becomes ``dp_shard_mod_ep`` and
    ``dp_shard_in_ep``."""
    built: list[str] = []
    built_sizes: list[int] = []
    parts: dict[str, tuple[str, ...]] = {}
    for name in names:
        if name == "dp_shard" and ep_size > 1:
            check_expert_parallel_sizes(ep_size, sizes[name])
            built += [DP_SHARD_MOD_EP, DP_SHARD_IN_EP]
            built_sizes += [sizes[name] // ep_size, ep_size]
            parts[name] = (DP_SHARD_MOD_EP, DP_SHARD_IN_EP)
        else:
            built.append(name)
            built_sizes.append(sizes[name])
            parts[name] = (name,)
    return tuple(built), tuple(built_sizes), parts


def flatten_expert_parallel_dims(mesh: DeviceMesh, parts: Mapping[str, tuple[str, ...]]) -> None:
    """Add the flattened ``dp_shard`` and ``ep`` views to ``mesh`` when ``dp_shard`` was built
    in two (:func:`expert_parallel_mesh_layout`); nothing otherwise."""
    if parts.get("dp_shard") == (DP_SHARD_MOD_EP, DP_SHARD_IN_EP):
        mesh[[DP_SHARD_MOD_EP, DP_SHARD_IN_EP]]._flatten("dp_shard")
        mesh[[DP_SHARD_IN_EP]]._flatten(EP_DIM)


def expert_shard_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The sub-mesh an expert's parameters are sharded over: ``(dp_replicate,
    dp_shard_mod_ep)`` (HSDP) or ``dp_shard_mod_ep`` alone, as ``mesh`` has them."""
    names = mesh.mesh_dim_names or ()
    present = [name for name in EXPERT_SHARD_DIMS if name in names]
    if DP_SHARD_MOD_EP not in present:
        raise ValueError(
            f"the device mesh (dimensions {names}) has no expert-parallel dimensions: build it "
            "from ParallelismConfig(ep_size=N) with N > 1"
        )
    return mesh[tuple(present)]
