"""Accelerate's ``ParallelismConfig`` on accel, and the parallel-rank properties of Accelerator.

A configuration is read as ``{dimension: size}`` (:func:`dimension_sizes`) over every dimension
known here (:func:`known_dimensions`): the records of :mod:`accel_base.mesh_dimension` for the
dimensions of Accelerate's ``ParallelismConfig`` (``dp_replicate``, ``dp_shard``, ``tp``, ``cp``,
``sp``) and those the installed strategies' descriptions declare (a ``pp`` or ``ep`` of a third
party's engine). Each check below works over that mapping, the records and the chosen strategy's
declared dimensions; no dimension has code of its own.

Which dimensions a job trains over is the strategy's to say: its description lists them
(``EngineDescription.dimensions``; ``dp_replicate``, whole copies, for every strategy;
``dp_shard``, the model sharded over the processes of the dimension, and ``tp``, its layers split
over them, for FSDP2). With a larger dimension the strategy does not list (context and sequence
parallelism, under every strategy accel has) the Accelerator is built and so is the mesh, as in
Accelerate; training on it is not run: ``prepare`` raises
:class:`~accel_core.out_of_scope.OutOfScopeError` with the dimension's reason
(``MeshDimension.why_not``; :func:`refuse_unsupported`). When the Accelerator is built, before the
strategy sets up its environment and before any model is prepared, ``ValueError`` is raised for
sizes whose product is neither 1 nor the number of processes (:func:`check_sizes`, as in
Accelerate), and for a size above 1 of a dimension whose strategy builds the mesh
(``strategy_builds_mesh``: ``dp_shard``) under a strategy that does not list it
(:func:`check_strategy`).

When neither the code (``strategy=``, a plugin) nor the launch (``ACCEL_STRATEGY``) names a
strategy, the dimensions above 1 beyond ``dp_replicate`` (:func:`needed_dimensions`) choose the
installed strategy that lists them all, the one whose description ``shards_by_default`` (FSDP2
from accel-backends) first; ``dp_shard_size > 1`` with none installed names the sharding one to
install. That strategy builds the mesh (``dp_replicate, dp_shard, tp``, flattened ``dp``,
``dp_shard_cp``, ``dp_cp``) in ``setup_environment`` and stores it in the state. Otherwise, with a
dimension whose processes share batches (``shards_data`` false: ``tp``, ``cp``, ``sp``) the
Accelerator builds the configuration's mesh through its ``get_device_mesh``; with
``dp_replicate_size > 1`` alone it builds the mesh as Accelerate does: one dimension named
``"dp_replicate"`` over every process, flattened into ``"dp"`` (``accelerator.torch_device_mesh``);
otherwise there is no mesh (None). As in Accelerate, on several accelerator devices a
configuration of size 1 is read as ``dp_replicate_size = num_processes``.

The configuration object is recognised by its fields (:class:`ParallelismConfigLike`): the
``ParallelismConfig`` class belongs to accel-backends, which accel-core does not import; the
Accelerator builds one itself (:func:`configured_parallelism`) through the class an installed
engine's description names.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from accel_base import mesh_dimension
from accel_base.mesh_dimension import (
    ALWAYS_RUN,
    DP_REPLICATE,
    DP_SHARD,
    TP,
    MeshDimension,
)
from accel_core.out_of_scope import OutOfScopeError, out_of_scope

if TYPE_CHECKING:
    from accel_core.state import AcceleratorState
    from accel_core.strategies import Strategy

logger = logging.getLogger(__name__)


class ParallelismConfigLike(Protocol):
    """The fields of Accelerate's ``ParallelismConfig`` that accel reads (``sp_size`` too, when
    the object has it). The size of any known dimension is read by its record's ``config_key``
    (:func:`dimension_sizes`); a field the object lacks is size 1."""

    dp_replicate_size: int
    dp_shard_size: int
    tp_size: int
    cp_size: int


def _size(config: ParallelismConfigLike, name: str) -> int:
    value = getattr(config, name, None)
    return 1 if value is None else int(value)


def known_dimensions() -> dict[str, MeshDimension]:
    """Every dimension known here, by name: Accelerate's (``ACCELERATE_DIMENSIONS``, field order)
    and, after them, those only the installed strategies' descriptions declare."""
    from accel_core.strategies.registry import strategy_descriptions

    return mesh_dimension.all_dimensions(strategy_descriptions().values())


def dimension_sizes(
    config: ParallelismConfigLike | None, known: Mapping[str, MeshDimension] | None = None
) -> dict[str, int]:
    """``config`` as ``{dimension name: size}`` over every dimension of ``known`` (default:
    :func:`known_dimensions`), in its order; 1 where the object has no such field. Empty for no
    configuration."""
    if config is None:
        return {}
    known = known_dimensions() if known is None else known
    return {name: _size(config, dimension.config_key) for name, dimension in known.items()}


def mesh_dimensions(strategy: Strategy) -> frozenset[str]:
    """The ``ParallelismConfig`` dimensions ``strategy`` trains over, as its description says
    (a strategy no package describes: whole copies only)."""
    from accel_core.strategies import describe_strategy

    description = describe_strategy(strategy.name)
    return ALWAYS_RUN if description is None else description.mesh_dimensions


def _runs(strategy_dimensions: frozenset[str], name: str) -> bool:
    return name in strategy_dimensions or name in ALWAYS_RUN


def _why_not(dimension: MeshDimension) -> str:
    """What to do to train on ``dimension``, from the installed strategies that declare it: the
    ``why_not`` of their records (how to choose them), else their names. With none, the
    dimension's own text (``cp``, ``sp``), else what to install."""
    from accel_core.built_in_engines import ENGINE_HINT
    from accel_core.strategies.registry import strategy_descriptions

    declared = [
        (description.name, record)
        for description in strategy_descriptions().values()
        for record in description.dimensions
        if record.name == dimension.name
    ]
    texts = list(dict.fromkeys(record.why_not for _, record in declared if record.why_not))
    if texts:
        return "; or ".join(texts)
    feature = dimension.title[:1].lower() + dimension.title[1:]
    if declared:
        runners = " or ".join(repr(name) for name, _ in declared)
        return (
            f"{feature} runs under strategy {runners} (name it: Accelerator(strategy="
            "NAME) or `accel launch --strategy NAME`)"
        )
    if dimension.why_not:
        return dimension.why_not
    return f"no installed strategy declares {feature} ({dimension.name!r}): {ENGINE_HINT[:-1]}"


def refuse_unsupported(config: ParallelismConfigLike | None, strategy: Strategy) -> None:
    """Raise ``OutOfScopeError`` for a dimension larger than 1 that ``strategy`` does not train
    on (its description's ``mesh_dimensions``; context and sequence parallelism under every
    strategy accel has), with the dimension's reason (``MeshDimension.why_not``). A dimension
    whose strategy builds the mesh (``dp_shard``) is :func:`check_strategy`'s. ``prepare`` calls
    it, before anything is prepared."""
    if config is None:
        return
    known = known_dimensions()
    supported = mesh_dimensions(strategy)
    for name, size in dimension_sizes(config, known).items():
        dimension = known[name]
        if size > 1 and not dimension.strategy_builds_mesh and not _runs(supported, name):
            raise OutOfScopeError(
                f"{dimension.title} (ParallelismConfig({dimension.config_key}={size})) is not "
                f"run by strategy {strategy.name!r}: {_why_not(dimension)}. The device mesh is "
                "built (accelerator.torch_device_mesh); prepare() does not train on this "
                "dimension."
            )


def configured_parallelism(
    parallelism_config: ParallelismConfigLike | None, torch_tp_plugin: object
) -> ParallelismConfigLike | None:
    """The ``ParallelismConfig`` of the run: ``parallelism_config``; else, as in Accelerate,
    one with ``tp_size=torch_tp_plugin.tp_size`` (a ``FutureWarning`` says the plugin is
    deprecated), or one read from the ``PARALLELISM_CONFIG_*`` variables when the launch set
    ``ACCELERATE_USE_PARALLELISM_CONFIG=true`` (``accel launch --use_parallelism_config``);
    else None. The class is the one an installed engine describes (accel-backends').

    Raises ``ImportError`` when one is asked for and no installed engine provides the class.
    """
    import os
    import warnings

    if parallelism_config is not None:
        return parallelism_config
    if torch_tp_plugin is not None:
        warnings.warn(
            "`TorchTensorParallelPlugin` is deprecated and will be removed in a future version "
            "of Accelerate. Please use the `ParallelismConfig` with `tp_size` instead.",
            FutureWarning,
            stacklevel=3,
        )
        size = int(getattr(torch_tp_plugin, "tp_size", 1) or 1)
        return _parallelism_config_class("torch_tp_plugin")(tp_size=size)
    if os.environ.get("ACCELERATE_USE_PARALLELISM_CONFIG", "false").lower() == "true":
        return _parallelism_config_class("ACCELERATE_USE_PARALLELISM_CONFIG=true")()
    return None


def _parallelism_config_class(asked_by: str) -> Callable[..., ParallelismConfigLike]:
    from accel_base.engine_description import installed_engines, load_hook

    for description in installed_engines().values():
        if description.parallelism_config_class:
            return cast(
                "Callable[..., ParallelismConfigLike]",
                load_hook(description.parallelism_config_class),
            )
    raise ImportError(
        f"{asked_by} asks for a ParallelismConfig, and no installed engine provides the class: "
        "pip install accel-backends (or pass parallelism_config= yourself)"
    )


def needed_dimensions(config: ParallelismConfigLike | None) -> frozenset[str]:
    """The dimensions of ``config`` larger than 1 beyond whole copies (``dp_replicate``): what
    the strategy chosen for it must list among its ``mesh_dimensions``."""
    return frozenset(
        name
        for name, size in dimension_sizes(config).items()
        if size > 1 and name not in ALWAYS_RUN
    )


def check_sizes(config: ParallelismConfigLike | None, num_processes: int) -> None:
    """Raise ``ValueError`` when the sizes of ``config`` multiply to neither 1 nor
    ``num_processes`` (every known dimension counts but those that borrow another's processes,
    ``MeshDimension.borrows_from``: ``ep``; the message lists those that deal different batches,
    and the others above 1), or when a borrowing dimension's size does not divide its host's.
    Runs before the strategy is chosen."""
    if config is None:
        return
    known = known_dimensions()
    all_sizes = dimension_sizes(config, known)
    _check_borrowed(all_sizes, known)
    sizes = {
        known[name].config_key: size
        for name, size in all_sizes.items()
        if known[name].borrows_from is None and (known[name].shards_data or size > 1)
    }
    total = 1
    for size in sizes.values():
        total *= size
    if total not in (1, num_processes):
        product = " x ".join(f"{name}={size}" for name, size in sizes.items())
        raise ValueError(
            f"ParallelismConfig total_size ({total}) does not match num_processes "
            f"({num_processes}): {product} must equal the world size {num_processes}; adjust "
            "the sizes (or leave them at 1)."
        )


def _listed(dimension: MeshDimension, size: int) -> bool:
    """Whether a message about the world size lists ``dimension``: those that deal different
    batches even at size 1 (but not one borrowing another's processes), the others above 1."""
    return size > 1 or (dimension.shards_data and dimension.borrows_from is None)


def _check_borrowed(sizes: Mapping[str, int], known: Mapping[str, MeshDimension]) -> None:
    """Raise ``ValueError`` for a dimension that borrows another's processes (``ep`` inside
    ``dp_shard``) whose size does not divide its host's."""
    for name, size in sizes.items():
        host = known[name].borrows_from
        if host is None or size == 1:
            continue
        host_size = sizes.get(host, 1)
        if host_size % size:
            key, host_key = known[name].config_key, known[host].config_key
            raise ValueError(
                f"ParallelismConfig({key}={size}, {host_key}={host_size}): {key} must divide "
                f"{host_key}, since {known[name].title.lower()} runs on the processes of "
                f"{host!r} (it does not add processes of its own); set {host_key} to a "
                f"multiple of {size}."
            )


def check_strategy(config: ParallelismConfigLike | None, strategy: Strategy) -> None:
    """Raise ``ValueError`` when ``config`` sets a dimension whose strategy builds the mesh
    (``MeshDimension.strategy_builds_mesh``: ``dp_shard_size > 1`` shards the model) above 1 and
    ``strategy`` does not list it among its mesh dimensions. Runs before
    ``strategy.setup_environment``."""
    if config is None:
        return
    known = known_dimensions()
    sizes = dimension_sizes(config, known)
    supported = mesh_dimensions(strategy)
    for name, size in sizes.items():
        dimension = known[name]
        if size > 1 and dimension.strategy_builds_mesh and not _runs(supported, name):
            shown = ", ".join(
                f"{known[other].config_key}={other_size}"
                for other, other_size in sizes.items()
                if other == name or _listed(known[other], other_size)
            )
            raise ValueError(
                f"ParallelismConfig({shown}) shards the model over the device mesh, which "
                f"strategy {strategy.name!r} does not do: {_why_not(dimension)}."
            )


def setup_device_mesh(
    config: ParallelismConfigLike | None,
    device_type: str,
    num_processes: int,
    multi_device: bool,
) -> Any:
    """Build the mesh of a configuration whose strategy does not build it (None when there is
    none; with a dimension above 1 that ``strategy_builds_mesh``, ``dp_shard``, it is the
    strategy's to build). Call on every process, after :func:`check_sizes`: building a mesh is a
    collective."""
    if config is None:
        return None
    known = known_dimensions()
    sizes = dimension_sizes(config, known)
    if any(size > 1 and known[name].strategy_builds_mesh for name, size in sizes.items()):
        return None
    replicas = sizes[DP_REPLICATE.name]
    same_batch = any(size > 1 and not known[name].shards_data for name, size in sizes.items())
    mesh = None
    get_device_mesh = getattr(config, "get_device_mesh", None)
    if same_batch and callable(get_device_mesh):
        mesh = get_device_mesh(device_type)
    elif replicas > 1:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device_type, (replicas,), mesh_dim_names=(DP_REPLICATE.name,))
        mesh[(DP_REPLICATE.name,)]._flatten("dp")
        if hasattr(config, "device_mesh"):
            config.device_mesh = mesh  # what ParallelismConfig.get_device_mesh() returns
    elif multi_device and num_processes > 1:
        set_size = getattr(config, "_set_size", None)
        if callable(set_size):
            set_size(DP_REPLICATE.name, num_processes)
        else:
            setattr(config, DP_REPLICATE.config_key, num_processes)
    return mesh


class ParallelismMixin:
    """The parallelism members of ``Accelerator`` (for a class with ``state``)."""

    state: AcceleratorState

    @property
    def parallelism_config(self) -> ParallelismConfigLike | None:
        """The ``ParallelismConfig`` given to the Accelerator, else None."""
        return self.state.parallelism_config

    @property
    def torch_device_mesh(self) -> Any:
        """torch's ``DeviceMesh`` of the parallelism configuration, else None."""
        return self.state.device_mesh

    @property
    def multi_device(self) -> bool:
        """Whether several processes run on accelerator devices (GPUs, XPUs...; not CPUs)."""
        strategy = self.state.strategy
        return bool(
            self.state.use_distributed and strategy is not None and strategy.compat.multi_device
        )

    @property
    def is_fsdp2(self) -> bool:
        """Whether the strategy is FSDP version 2."""
        return self.state.is_fsdp2

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        """Whether composable (DTensor-based) parallelism is on: FSDP2."""
        return self.is_fsdp2

    @property
    def should_save_model(self) -> bool:
        """Whether this process writes model files: with a parallelism configuration every
        process does (Accelerate 1.15); without one, the local main process."""
        if self.parallelism_config is None:
            return bool(self.state.is_local_main_process)
        return True

    @property
    def tensor_parallel_rank(self) -> int:
        """This process's rank in the tensor-parallel group (the mesh's ``tp`` dimension; 0 with
        ``tp_size`` 1). Raises RuntimeError without a parallelism configuration, as Accelerate
        does."""
        return self._local_rank(TP)

    @property
    def pipeline_parallel_rank(self) -> int:
        """Pipeline parallelism is out of scope: raises OutOfScopeError (NotImplementedError)."""
        raise out_of_scope("Pipeline parallelism", "use data parallelism (the ddp strategy)")

    @property
    def context_parallel_rank(self) -> int:
        """Context parallelism is out of scope: raises OutOfScopeError (NotImplementedError)."""
        raise out_of_scope("Context parallelism", "use data parallelism (the ddp strategy)")

    @property
    def data_parallel_rank(self) -> int:
        """This process's rank among the data-parallel replicas (0 with ``dp_replicate_size``
        1). Raises RuntimeError without a parallelism configuration, as Accelerate does."""
        return self._local_rank(DP_REPLICATE)

    @property
    def data_parallel_shard_rank(self) -> int:
        """This process's rank in the shard group (the mesh's ``dp_shard`` dimension; 0 with
        ``dp_shard_size`` 1). Raises RuntimeError without a parallelism configuration, as
        Accelerate does."""
        return self._local_rank(DP_SHARD)

    def _local_rank(self, dimension: MeshDimension) -> int:
        config = self._require_parallelism_config(dimension.title)
        if _size(config, dimension.config_key) > 1 and self.torch_device_mesh is not None:
            return int(self.torch_device_mesh.get_local_rank(dimension.name))
        return 0

    def _require_parallelism_config(self, what: str) -> ParallelismConfigLike:
        config = self.parallelism_config
        if config is None:
            raise RuntimeError(
                f"{what} is not configured: pass Accelerator(parallelism_config="
                "ParallelismConfig(...)) first."
            )
        return config

    @contextlib.contextmanager
    def maybe_context_parallel(
        self,
        buffers: list[torch.Tensor] | None = None,
        buffer_seq_dims: list[int] | None = None,
        no_restore_buffers: set[torch.Tensor] | None = None,
    ) -> Iterator[None]:
        """Accelerate's context-parallel block. Context parallelism is out of scope (a
        ``cp_size > 1`` is refused by the constructor), so, as Accelerate does when it is off,
        the block runs unchanged after a one-time warning."""
        _warn_once(
            "Context parallel training is not enabled (it is out of scope in accel); "
            "maybe_context_parallel() has no effect."
        )
        yield

    def deepspeed_ulysses_dl_adapter(self, dl: Any, model: torch.nn.Module) -> Any:
        """Accelerate's DeepSpeed sequence-parallel loader adapter: ``dl`` unchanged, since
        sequence parallelism (``sp_size > 1``) is out of scope and refused by the constructor."""
        return dl


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)
