"""The dimensions of a device mesh as data: one :class:`MeshDimension` per dimension a
``ParallelismConfig`` can size.

An engine declares the dimensions it trains over in its description
(``EngineDescription.dimensions``). :data:`ACCELERATE_DIMENSIONS` is the one table of the
dimensions Hugging Face Accelerate's ``ParallelismConfig`` has, each with what accel says when a
strategy does not run it: the ones no installed engine trains on (``cp``, ``sp``) stay known
through it, so their sizes are read, counted and refused with a reason. A dimension no entry of
the table names (``pp``, ``ep``) comes from the description of the engine that declares it
(:func:`all_dimensions`). Everything that validates a ``ParallelismConfig``
(:mod:`accel_core.parallelism`), chooses a strategy for it (:mod:`accel_core.strategies.resolver`)
or offers its sizes at launch (``accel launch --parallelism_config_*``, the config file's
``parallelism_config`` section) reads these records.

Standard library only: ``accel launch`` reads it without importing torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class MeshDimension:
    """One dimension of the device mesh, as the engines, the validation and the launcher see it.

    Attributes:
        name: the mesh dimension's name (``"dp_replicate"``, ``"dp_shard"``, ``"tp"``, ...).
        config_key: the ``ParallelismConfig`` field of its size (``"tp_size"``); a configuration
            object without the field has size 1 there.
        order: its place in the mesh, outermost first (``dp_replicate`` 0, ``dp_shard`` 1, ``cp``
            2, ``sp`` 3, ``tp`` 4: tensor-parallel groups are neighbouring ranks). A new dimension
            picks a number between, or below 0 to lie outside the copies (pipeline stages).
        shards_data: whether the data loader deals different batches over it (``dp_replicate``,
            ``dp_shard``); the processes of a dimension that does not (``tp``, ``cp``) see the
            same batch. A size check lists these dimensions even at size 1.
        title: the feature, as a message starts with it (``"Tensor parallelism"``).
        description: what its size counts, in a few words: the help of its launch option and of
            its config-file key (``"tensor-parallel size"``).
        why_not: what to do instead when the chosen strategy does not train on it, as the
            refusal says it. Empty in the table for a dimension an engine runs: the refusal then
            reads the installed engines that declare it, the ``why_not`` of their own record
            (how to choose that engine), else their names. Set in the table for a dimension no
            engine runs (``cp``, ``sp``), so that the refusal still says why.
        launch_option: the ``accel launch`` flag (without dashes) and ``parallelism_config``
            config-file key of its size, spelled as Accelerate's are (``parallelism_config_`` and
            the ``config_key``: the launcher reads that prefix as ParallelismConfig's, a flag
            with it implies ``--use_parallelism_config``); the workers get the size as
            ``PARALLELISM_CONFIG_<CONFIG_KEY>``. None: no launch option (the script sets it).
        strategy_builds_mesh: only a strategy that trains over it can start with a size above 1,
            since that strategy builds the mesh while it sets up its environment (``dp_shard``:
            the model is sharded over it). A size above 1 then chooses the engine that shards by
            default when nothing names a strategy, is refused with ``ValueError`` when the
            Accelerator is built under a strategy that does not declare it, and the Accelerator
            builds no mesh of its own. The other dimensions are refused only by ``prepare``,
            after the Accelerator built their mesh, as in Accelerate.
        borrows_from: the name of the dimension whose processes it reuses (``ep`` lives inside
            ``dp_shard``, as in torchtitan and transformers): its size must divide that one's
            and does not multiply the world size. None: a dimension of its own processes.
    """

    name: str
    config_key: str
    order: int
    shards_data: bool
    title: str
    description: str
    why_not: str = ""
    launch_option: str | None = None
    strategy_builds_mesh: bool = False
    borrows_from: str | None = None


DP_REPLICATE = MeshDimension(
    name="dp_replicate",
    config_key="dp_replicate_size",
    order=0,
    shards_data=True,
    title="Data parallelism",
    description="data-parallel replicas (DDP-style copies)",
    launch_option="parallelism_config_dp_replicate_size",
)
DP_SHARD = MeshDimension(
    name="dp_shard",
    config_key="dp_shard_size",
    order=1,
    shards_data=True,
    title="Shard-based data parallelism",
    description="processes each model is sharded over",
    launch_option="parallelism_config_dp_shard_size",
    strategy_builds_mesh=True,
)
TP = MeshDimension(
    name="tp",
    config_key="tp_size",
    order=4,
    shards_data=False,
    title="Tensor parallelism",
    description="tensor-parallel size",
    launch_option="parallelism_config_tp_size",
)
CP = MeshDimension(
    name="cp",
    config_key="cp_size",
    order=2,
    shards_data=False,
    title="Context parallelism",
    description="context-parallel size",
    why_not=(
        "context parallelism is not run by accel: torch's context-parallel attention has no "
        "CPU kernel (aten._scaled_dot_product_flash_attention_for_cpu has no DTensor sharding "
        "strategy in torch 2.13), and accel has not run it on GPUs; split long sequences' work "
        "with tp_size, or shard the model with dp_shard_size"
    ),
    launch_option="parallelism_config_cp_size",
)
SP = MeshDimension(
    name="sp",
    config_key="sp_size",
    order=3,
    shards_data=False,
    title="Sequence parallelism",
    description="sequence-parallel size",
    why_not=(
        "sequence parallelism (Accelerate's sp_size) is run by no installed engine; split the "
        "model with tp_size or shard it with dp_shard_size"
    ),
    launch_option="parallelism_config_sp_size",
)

#: The dimensions of Accelerate's ``ParallelismConfig``, in the order of its fields (the order
#: messages list sizes in); ``cp`` and ``sp``, known through this table alone since no engine
#: accel has declares them, carry their refusal text here.
ACCELERATE_DIMENSIONS: tuple[MeshDimension, ...] = (DP_REPLICATE, DP_SHARD, TP, CP, SP)

#: The dimensions every strategy trains over, declared or not: whole copies of the model.
ALWAYS_RUN: frozenset[str] = frozenset({DP_REPLICATE.name})


class DeclaresDimensions(Protocol):
    """What :func:`all_dimensions` reads of an engine description."""

    @property
    def dimensions(self) -> tuple[MeshDimension, ...]: ...


def all_dimensions(descriptions: Iterable[DeclaresDimensions] = ()) -> dict[str, MeshDimension]:
    """Every dimension known here, by name: :data:`ACCELERATE_DIMENSIONS` in their order, then
    those only ``descriptions`` declare, by mesh order (then name). The table's record wins over
    a description's of the same name, and the first description's over a later one's."""
    found = {dimension.name: dimension for dimension in ACCELERATE_DIMENSIONS}
    declared: dict[str, MeshDimension] = {}
    for description in descriptions:
        for dimension in description.dimensions:
            if dimension.name not in found:
                declared.setdefault(dimension.name, dimension)
    for dimension in sorted(declared.values(), key=lambda d: (d.order, d.name)):
        found[dimension.name] = dimension
    return found


def mesh_order(dimensions: Iterable[MeshDimension]) -> tuple[str, ...]:
    """The names of ``dimensions`` in mesh order, outermost first."""
    return tuple(d.name for d in sorted(dimensions, key=lambda d: (d.order, d.name)))


def dimensions_named(
    names: Iterable[str], known: Mapping[str, MeshDimension] | None = None
) -> tuple[MeshDimension, ...]:
    """The records of ``names`` (an older description's ``mesh_dimensions``), in mesh order.

    Raises ``ValueError`` for a name no record of ``known`` (default: the Accelerate table) has:
    a new dimension is declared with its record, not its name alone.
    """
    table = {d.name: d for d in ACCELERATE_DIMENSIONS} if known is None else dict(known)
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise ValueError(
            f"mesh dimension(s) {', '.join(map(repr, unknown))} have no record: the known ones "
            f"are {', '.join(table)}; declare a new one as a MeshDimension in "
            "EngineDescription(dimensions=(...))"
        )
    return tuple(sorted((table[name] for name in set(names)), key=lambda d: (d.order, d.name)))
