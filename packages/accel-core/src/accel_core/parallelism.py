"""Accelerate's ``ParallelismConfig`` on accel, and the parallel-rank properties of Accelerator.

accel runs data parallelism (the ``ddp`` strategy). ``Accelerator(parallelism_config=...)``
accepts a configuration that describes it: ``dp_shard_size``, ``tp_size``, ``cp_size`` and
``sp_size`` are 1, and ``dp_replicate_size`` is 1 or the number of processes. Anything else is
refused when the Accelerator is built, before the process group is touched:

- ``dp_shard_size > 1`` shards the model (FSDP / HSDP): accel-backends does not provide the FSDP
  strategy yet (``NotImplementedError``);
- ``tp_size``, ``cp_size`` or ``sp_size > 1``: tensor, context and sequence parallelism are out
  of scope (:class:`~accel_core.out_of_scope.OutOfScopeError`);
- sizes whose product is neither 1 nor the number of processes: ``ValueError``, as in Accelerate.

With ``dp_replicate_size > 1`` the Accelerator builds torch's ``DeviceMesh`` as Accelerate does:
one dimension named ``"dp_replicate"`` over every process, flattened into ``"dp"``
(``accelerator.torch_device_mesh``); otherwise there is no mesh (None). As in Accelerate, on
several accelerator devices a configuration of size 1 is read as ``dp_replicate_size =
num_processes``.

The configuration object is recognised by its fields (:class:`ParallelismConfigLike`): the
``ParallelismConfig`` class belongs to accel-backends, which accel-core does not import.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import torch

from accel_core.out_of_scope import out_of_scope

if TYPE_CHECKING:
    from accel_core.state import AcceleratorState

logger = logging.getLogger(__name__)

_INSTEAD = "leave it at 1: accel trains with data parallelism (the ddp strategy)"


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


def refuse_unsupported(config: ParallelismConfigLike | None) -> None:
    """Raise for the dimensions accel does not run (see the module docstring)."""
    if config is None:
        return
    for name, feature in (
        ("tp_size", "Tensor parallelism"),
        ("cp_size", "Context parallelism"),
        ("sp_size", "Sequence parallelism"),
    ):
        size = _size(config, name)
        if size > 1:
            raise out_of_scope(f"{feature} (ParallelismConfig({name}={size}))", _INSTEAD)
    shards = _size(config, "dp_shard_size")
    if shards > 1:
        raise NotImplementedError(
            f"ParallelismConfig(dp_shard_size={shards}) shards the model with FSDP through the "
            "device mesh, which accel does not do yet; pass "
            "fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2) to shard over every "
            "process, or set dp_shard_size=1 to train with data parallelism (the ddp strategy)."
        )


def setup_device_mesh(
    config: ParallelismConfigLike | None,
    device_type: str,
    num_processes: int,
    multi_device: bool,
) -> Any:
    """Check the data-parallel size against ``num_processes`` and build the mesh (None when
    there is none). Call on every process: building a mesh is a collective."""
    if config is None:
        return None
    replicas = _size(config, "dp_replicate_size")
    if replicas not in (1, num_processes):
        raise ValueError(
            f"ParallelismConfig total_size ({replicas}) does not match num_processes "
            f"({num_processes}); set dp_replicate_size={num_processes} (or leave it at 1)."
        )
    mesh = None
    if replicas > 1:
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
        """This process's rank in the tensor-parallel group: 0 (tensor parallelism is off).

        Raises RuntimeError without a parallelism configuration, as Accelerate does.
        """
        self._require_parallelism_config("Tensor parallelism")
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
        """This process's rank in the shard group: 0 (sharding is off). Raises RuntimeError
        without a parallelism configuration, as Accelerate does."""
        self._require_parallelism_config("Shard-based data parallelism")
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
