"""Accelerate's ``ParallelismConfig`` on accel, and the parallel-rank properties of Accelerator.

Which dimensions a job trains over is the strategy's to say: its description lists them
(``EngineDescription.mesh_dimensions``; ``dp_replicate``, whole copies, for every strategy;
``dp_shard``, the model sharded over the processes of the dimension, and ``tp``, its layers split
over them, for FSDP2). With a larger dimension the strategy does not list (context and sequence
parallelism, under every strategy accel has) the Accelerator is built and so is the mesh, as in
Accelerate; training on it is not run: ``prepare`` raises
:class:`~accel_core.out_of_scope.OutOfScopeError` with the reason (:func:`refuse_unsupported`).
When the Accelerator is built, before the strategy sets up its environment and before any model
is prepared, ``ValueError`` is raised for sizes whose product is neither 1 nor the number of
processes (:func:`check_sizes`, as in Accelerate), and for ``dp_shard_size > 1`` under a strategy
that does not list ``dp_shard`` (:func:`check_strategy`).

When neither the code (``strategy=``, a plugin) nor the launch (``ACCEL_STRATEGY``) names a
strategy, ``dp_shard_size > 1`` chooses the one whose description ``shards_by_default`` (FSDP2
from accel-backends), and another dimension above 1 (``tp_size``) the installed one that lists it
(:func:`needed_dimensions`). That strategy builds the mesh (``dp_replicate, dp_shard, tp``,
flattened ``dp``, ``dp_shard_cp``, ``dp_cp``) in ``setup_environment`` and stores it in the state.
Otherwise, with a model-parallel dimension the Accelerator builds the configuration's mesh
through its ``get_device_mesh``; with ``dp_replicate_size > 1`` alone it builds the mesh as
Accelerate does: one dimension named ``"dp_replicate"`` over every process, flattened into
``"dp"`` (``accelerator.torch_device_mesh``); otherwise there is no mesh (None). As in
Accelerate, on several accelerator devices a configuration of size 1 is read as
``dp_replicate_size = num_processes``.

The configuration object is recognised by its fields (:class:`ParallelismConfigLike`): the
``ParallelismConfig`` class belongs to accel-backends, which accel-core does not import; the
Accelerator builds one itself (:func:`configured_parallelism`) through the class an installed
engine's description names.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from accel_core.out_of_scope import OutOfScopeError, out_of_scope

if TYPE_CHECKING:
    from accel_core.state import AcceleratorState
    from accel_core.strategies import Strategy

logger = logging.getLogger(__name__)

#: Why a dimension is not trained on, and what to do, when no installed strategy lists it.
_WHY_NOT: dict[str, str] = {
    "tp": (
        "tensor parallelism runs under the fsdp strategy of accel-backends (pip install "
        "accel-backends; it is chosen when no strategy is named, or pass fsdp_plugin="
        "FullyShardedDataParallelPlugin(fsdp_version=2))"
    ),
    "cp": (
        "context parallelism is not run by accel: torch's context-parallel attention has no "
        "CPU kernel (aten._scaled_dot_product_flash_attention_for_cpu has no DTensor sharding "
        "strategy in torch 2.13), and accel has not run it on GPUs; split long sequences' work "
        "with tp_size, or shard the model with dp_shard_size"
    ),
    "sp": (
        "DeepSpeed's sequence parallelism (Ulysses) is not run by accel; split the model with "
        "tp_size or shard it with dp_shard_size (the fsdp strategy)"
    ),
}
_DATA_PARALLEL = ("dp_replicate_size", "dp_shard_size")
_MODEL_PARALLEL = ("tp_size", "cp_size", "sp_size")


class ParallelismConfigLike(Protocol):
    """The fields of Accelerate's ``ParallelismConfig`` that accel reads (``sp_size`` too, when
    the object has it)."""

    dp_replicate_size: int
    dp_shard_size: int
    tp_size: int
    cp_size: int


def _size(config: ParallelismConfigLike, name: str) -> int:
    value = getattr(config, name, None)
    return 1 if value is None else int(value)


#: The dimensions of a strategy no package describes: whole copies only.
_REPLICAS_ONLY = frozenset({"dp_replicate"})


def mesh_dimensions(strategy: Strategy) -> frozenset[str]:
    """The ``ParallelismConfig`` dimensions ``strategy`` trains over, as its description says."""
    from accel_core.strategies import describe_strategy

    description = describe_strategy(strategy.name)
    return _REPLICAS_ONLY if description is None else description.mesh_dimensions


def refuse_unsupported(config: ParallelismConfigLike | None, strategy: Strategy) -> None:
    """Raise ``OutOfScopeError`` for a dimension larger than 1 that ``strategy`` does not train
    on (its description's ``mesh_dimensions``; context and sequence parallelism under every
    strategy accel has). ``prepare`` calls it, before anything is prepared."""
    if config is None:
        return
    supported = mesh_dimensions(strategy)
    for name, feature in (
        ("tp_size", "Tensor parallelism"),
        ("cp_size", "Context parallelism"),
        ("sp_size", "Sequence parallelism"),
    ):
        size = _size(config, name)
        dimension = name.removesuffix("_size")
        if size > 1 and dimension not in supported:
            raise OutOfScopeError(
                f"{feature} (ParallelismConfig({name}={size})) is not run by strategy "
                f"{strategy.name!r}: {_WHY_NOT[dimension]}. The device mesh is built "
                "(accelerator.torch_device_mesh); prepare() does not train on this dimension."
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
    from accel_core.engine_description import installed_engines, load_hook

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
    if config is None:
        return frozenset()
    names = ("dp_shard_size", *_MODEL_PARALLEL)
    return frozenset(n.removesuffix("_size") for n in names if _size(config, n) > 1)


def check_sizes(config: ParallelismConfigLike | None, num_processes: int) -> None:
    """Raise ``ValueError`` when the data-parallel sizes of ``config`` multiply to neither 1 nor
    ``num_processes``. Runs before the strategy is chosen."""
    if config is None:
        return
    sizes = {
        name: _size(config, name)
        for name in (*_DATA_PARALLEL, *_MODEL_PARALLEL)
        if name in _DATA_PARALLEL or _size(config, name) > 1
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


def check_strategy(config: ParallelismConfigLike | None, strategy: Strategy) -> None:
    """Raise ``ValueError`` when ``config`` shards the model (``dp_shard_size > 1``) and
    ``strategy`` does not list ``dp_shard`` among its mesh dimensions. Runs before
    ``strategy.setup_environment``."""
    if config is None:
        return
    replicas, shards = _size(config, "dp_replicate_size"), _size(config, "dp_shard_size")
    if shards > 1 and "dp_shard" not in mesh_dimensions(strategy):
        raise ValueError(
            f"ParallelismConfig(dp_replicate_size={replicas}, dp_shard_size={shards}) shards the "
            f"model over the device mesh, which strategy {strategy.name!r} does not do: leave "
            "the choice to the configuration (no strategy=, plugin or ACCEL_STRATEGY; FSDP2 is "
            "chosen), pass fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2) or launch "
            "with `accel launch --use_fsdp`; or set dp_shard_size=1."
        )


def setup_device_mesh(
    config: ParallelismConfigLike | None,
    device_type: str,
    num_processes: int,
    multi_device: bool,
) -> Any:
    """Build the mesh of a configuration that does not shard (None when there is none; a
    sharding one is the strategy's to build). Call on every process, after
    :func:`check_sizes`: building a mesh is a collective."""
    if config is None or _size(config, "dp_shard_size") > 1:
        return None
    replicas = _size(config, "dp_replicate_size")
    mesh = None
    get_device_mesh = getattr(config, "get_device_mesh", None)
    if any(_size(config, name) > 1 for name in _MODEL_PARALLEL) and callable(get_device_mesh):
        mesh = get_device_mesh(device_type)
    elif replicas > 1:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device_type, (replicas,), mesh_dim_names=("dp_replicate",))
        mesh[("dp_replicate",)]._flatten("dp")
        if hasattr(config, "device_mesh"):
            config.device_mesh = mesh  # what ParallelismConfig.get_device_mesh() returns
    elif multi_device and num_processes > 1:
        set_size = getattr(config, "_set_size", None)
        if callable(set_size):
            set_size("dp_replicate", num_processes)
        else:
            config.dp_replicate_size = num_processes
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
        return bool(self.state.use_distributed and strategy is not None and strategy.multi_device)

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
        config = self._require_parallelism_config("Tensor parallelism")
        if _size(config, "tp_size") > 1 and self.torch_device_mesh is not None:
            return int(self.torch_device_mesh.get_local_rank("tp"))
        return 0

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
        config = self._require_parallelism_config("Data parallelism")
        if _size(config, "dp_replicate_size") > 1 and self.torch_device_mesh is not None:
            return int(self.torch_device_mesh.get_local_rank("dp_replicate"))
        return 0

    @property
    def data_parallel_shard_rank(self) -> int:
        """This process's rank in the shard group (the mesh's ``dp_shard`` dimension; 0 with
        ``dp_shard_size`` 1). Raises RuntimeError without a parallelism configuration, as
        Accelerate does."""
        config = self._require_parallelism_config("Shard-based data parallelism")
        if _size(config, "dp_shard_size") > 1 and self.torch_device_mesh is not None:
            return int(self.torch_device_mesh.get_local_rank("dp_shard"))
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
