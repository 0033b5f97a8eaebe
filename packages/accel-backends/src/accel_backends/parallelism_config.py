"""``ParallelismConfig``: how the processes of a run split into the dimensions of a device mesh.

Accelerate 1.15's fields, defaults (``PARALLELISM_CONFIG_*`` variables) and properties. accel
trains over ``dp_replicate`` (copies), ``dp_shard`` (FSDP sharding; both > 1 is HSDP) and ``tp``
(tensor parallelism, under the ``fsdp`` strategy: :mod:`accel_backends.tensor_parallel`) and
``pp`` (pipeline stages, accel's own field: :mod:`accel_backends.fsdp.pipelining`).
:meth:`ParallelismConfig.build_device_mesh` builds the mesh with
``torch.distributed.device_mesh.init_device_mesh`` on the current process group (any backend,
gloo included), context and sequence dimensions too (``cp_size``, ``sp_size`` > 1), as
Accelerate builds them; training on those is refused by ``prepare`` (``OutOfScopeError``).

Unlike Accelerate, ``dp_replicate_size > 1`` with ``tp_size > 1`` and ``dp_shard_size`` 1 is
accepted: each tensor-parallel model is copied over ``dp_replicate``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from accel_backends.expert_parallel_config import ExpertParallelConfig
from accel_backends.expert_parallel_mesh import (
    check_expert_parallel_sizes,
    expert_parallel_mesh_layout,
    flatten_expert_parallel_dims,
)
from accel_backends.fsdp.description import PP
from accel_backends.out_of_scope import (
    DeepSpeedSequenceParallelConfig,
    OutOfScopeParallelism,
    TorchContextParallelConfig,
)
from accel_backends.pipeline_config import PipelineParallelConfig
from accel_backends.tensor_parallel_config import TorchTensorParallelConfig
from accel_base.mesh_dimension import ACCELERATE_DIMENSIONS, mesh_order

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: The order of mesh dimensions, outermost first (Accelerate's, with ``pp`` outside them all),
#: from their records' ``order``.
MESH_ORDER = mesh_order((*ACCELERATE_DIMENSIONS, PP))
_NAMES = ("pp", "dp_replicate", "dp_shard", "tp", "cp", "sp", "ep")


def _size_from_env(name: str) -> int:
    text = os.environ.get(f"PARALLELISM_CONFIG_{name}", "1")
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"PARALLELISM_CONFIG_{name}={text!r} is not an integer") from None


@dataclass
class ParallelismConfig:
    """The parallel dimensions of a run; their product is the number of processes.

    Args:
        dp_replicate_size: data-parallel replicas (default 1, or
            ``PARALLELISM_CONFIG_DP_REPLICATE_SIZE``).
        dp_shard_size: processes each model is sharded over (FSDP; default 1).
        tp_size: processes each layer is split over (tensor parallelism; default 1).
        cp_size, sp_size: context and sequence parallel sizes (the mesh is built with them;
            ``prepare`` refuses to train on them).
        cp_backend: ``torch``; sp_backend: ``deepspeed``.
        tp_handler, cp_handler, sp_handler: their options (built when the size is > 1).
        pp_size: pipeline stages the model is split into (accel's; transformers'
            ``DistributedConfig`` name; default 1, or ``PARALLELISM_CONFIG_PP_SIZE``). Multiplies
            the number of processes; the stages are the outermost dimension of the mesh.
        pp_handler: how the model is split and which schedule runs
            (:class:`~accel_backends.pipeline_config.PipelineParallelConfig`; built when
            ``pp_size > 1``).
        ep_size: processes each mixture-of-experts layer's experts are split over (expert
            parallelism, under the ``fsdp`` strategy; default 1, or
            ``PARALLELISM_CONFIG_EP_SIZE``). Borrowed from ``dp_shard`` as in torchtitan and
            transformers: it must divide ``dp_shard_size`` and does not count towards
            ``total_size`` (:mod:`accel_backends.expert_parallel_mesh`).
        ep_handler: which modules hold the experts
            (:class:`~accel_backends.expert_parallel_config.ExpertParallelConfig`; built when
            ``ep_size > 1``).

    Raises ``ValueError`` for a size below 1, an unknown backend, or an invalid combination.
    """

    dp_replicate_size: int | None = None
    dp_shard_size: int | None = None
    tp_size: int | None = None
    cp_size: int | None = None
    cp_backend: Literal["torch"] | None = None
    sp_size: int | None = None
    sp_backend: Literal["deepspeed"] | None = None
    tp_handler: TorchTensorParallelConfig | None = None
    cp_handler: TorchContextParallelConfig | None = None
    sp_handler: DeepSpeedSequenceParallelConfig | None = None
    pp_size: int | None = None
    pp_handler: PipelineParallelConfig | None = None
    ep_size: int | None = None
    ep_handler: ExpertParallelConfig | None = None

    def __post_init__(self) -> None:
        #: The mesh :meth:`get_device_mesh` built (not a field: not compared, not repr'd).
        self.device_mesh: DeviceMesh | None = None
        for name in _NAMES:
            if getattr(self, f"{name}_size") is None:
                setattr(self, f"{name}_size", _size_from_env(f"{name.upper()}_SIZE"))
        if self.cp_backend is None:
            self.cp_backend = os.environ.get("PARALLELISM_CONFIG_CP_BACKEND", "torch")  # type: ignore[assignment]
        if self.sp_backend is None:
            self.sp_backend = os.environ.get("PARALLELISM_CONFIG_SP_BACKEND", "deepspeed")  # type: ignore[assignment]
        for name in _NAMES:
            size = getattr(self, f"{name}_size")
            if size < 1:
                raise ValueError(f"{name}_size must be at least 1, but got {size}")
        check_expert_parallel_sizes(self.ep_size, self.dp_shard_size)
        if self.cp_backend != "torch":
            raise ValueError(f"cp_backend must be one of ['torch'], but got {self.cp_backend}")
        if self.sp_backend != "deepspeed":
            raise ValueError(f"sp_backend must be one of ['deepspeed'], but got {self.sp_backend}")
        if self.tp_size > 1 and self.tp_handler is None:
            self.tp_handler = TorchTensorParallelConfig()
        if self.pp_size > 1 and self.pp_handler is None:
            self.pp_handler = PipelineParallelConfig()
        if self.ep_size > 1 and self.ep_handler is None:
            self.ep_handler = ExpertParallelConfig()
        if self.ep_handler is not None and not isinstance(self.ep_handler, ExpertParallelConfig):
            raise TypeError(
                "ep_handler must be an ExpertParallelConfig(experts=...), got "
                f"{type(self.ep_handler).__name__}"
            )
        if self.pp_handler is not None and not isinstance(self.pp_handler, PipelineParallelConfig):
            raise TypeError(
                "pp_handler must be a PipelineParallelConfig(split_fn=..., schedule=..., "
                f"microbatches=...), got {type(self.pp_handler).__name__}"
            )
        if self.cp_size > 1:
            if self.cp_handler is None:
                self.cp_handler = TorchContextParallelConfig()
            elif not isinstance(self.cp_handler, TorchContextParallelConfig):
                raise ValueError(
                    f"ParallelismConfig's cp_backend={self.cp_backend} requires "
                    f"TorchContextParallelConfig, but cp_handler was set to "
                    f"{type(self.cp_handler)}"
                )
        if self.sp_size > 1 and self.sp_handler is None:
            self.sp_handler = DeepSpeedSequenceParallelConfig()
        if self.cp_size > 1 and self.sp_size > 1:
            raise ValueError(
                "Context Parallelism (CP) and Sequence Parallelism (SP) are mutually exclusive. "
                f"Got cp_size={self.cp_size} and sp_size={self.sp_size}. Please set either "
                "cp_size=1 or sp_size=1."
            )
        pure_data_parallel = self.dp_replicate_size > 1 and self.dp_shard_size == 1
        if self.cp_size > 1 and pure_data_parallel:
            raise ValueError(
                "Context parallelism (cp_size > 1) cannot be used with pure data parallelism "
                "(dp_replicate_size > 1 and dp_shard_size == 1)."
            )

    @property
    def _sizes(self) -> dict[str, int]:
        return {
            "pp": self.pp_size,
            "dp_replicate": self.dp_replicate_size,
            "dp_shard": self.dp_shard_size,
            "tp": self.tp_size,
            "cp": self.cp_size,
            "sp": self.sp_size,
        }

    @property
    def total_size(self) -> int:
        """The product of every size: the number of processes the config needs."""
        return self.pp_size * self.data_parallel_size * self.non_data_parallel_size

    @property
    def data_parallel_size(self) -> int:
        """``dp_replicate_size * dp_shard_size``."""
        return self.dp_replicate_size * self.dp_shard_size

    @property
    def non_data_parallel_size(self) -> int:
        """``tp_size * cp_size * sp_size``: processes that see the same batch."""
        return self.tp_size * self.cp_size * self.sp_size

    @property
    def dp_replicate_enabled(self) -> bool:
        """Whether ``dp_replicate_size > 1``."""
        return self.dp_replicate_size > 1

    @property
    def dp_shard_enabled(self) -> bool:
        """Whether ``dp_shard_size > 1``."""
        return self.dp_shard_size > 1

    @property
    def tp_enabled(self) -> bool:
        """Whether ``tp_size > 1``."""
        return self.tp_size > 1

    @property
    def ep_enabled(self) -> bool:
        """Whether ``ep_size > 1`` (expert parallelism, on the processes of ``dp_shard``)."""
        return self.ep_size > 1

    @property
    def cp_enabled(self) -> bool:
        """Whether ``cp_size > 1``."""
        return self.cp_size > 1

    @property
    def sp_enabled(self) -> bool:
        """Whether ``sp_size > 1``."""
        return self.sp_size > 1

    @property
    def pp_enabled(self) -> bool:
        """Whether ``pp_size > 1``."""
        return self.pp_size > 1

    @property
    def dp_dim_names(self) -> list[str]:
        """The enabled data-parallel dimensions (``dp_replicate``, ``dp_shard``)."""
        return [n for n in ("dp_replicate", "dp_shard") if self._sizes[n] > 1]

    @property
    def non_dp_dim_names(self) -> list[str]:
        """The enabled dimensions that see the same batch (``tp``, ``cp``, ``sp``)."""
        return [n for n in ("tp", "cp", "sp") if self._sizes[n] > 1]

    @property
    def dp_shard_cp_dim_names(self) -> list[str]:
        """The enabled dimensions FSDP shards the model over (``dp_shard``, ``cp``)."""
        return [n for n in ("dp_shard", "cp") if self._sizes[n] > 1]

    @property
    def dp_cp_dim_names(self) -> list[str]:
        """The enabled dimensions the loss is averaged over."""
        return [n for n in ("dp_replicate", "dp_shard", "cp") if self._sizes[n] > 1]

    @property
    def fsdp_dim_names(self) -> list[str]:
        """The mesh dimensions FSDP runs over: ``dp_replicate`` (if enabled), ``dp_shard_cp``."""
        return [*(["dp_replicate"] if self.dp_replicate_enabled else []), "dp_shard_cp"]

    @property
    def active_mesh_dims(self) -> list[str]:
        """Every enabled dimension: data-parallel ones first."""
        return self.dp_dim_names + self.non_dp_dim_names

    def to_json(self) -> dict[str, object]:
        """The sizes, backends and handler options as JSON-friendly values (no mesh)."""
        result: dict[str, object] = {}
        for name, value in vars(self).items():
            if name == "device_mesh":
                continue
            handler = isinstance(
                value,
                (
                    OutOfScopeParallelism,
                    TorchTensorParallelConfig,
                    PipelineParallelConfig,
                    ExpertParallelConfig,
                ),
            )
            result[name] = _handler_json(value) if handler else value
        return result

    def build_device_mesh(self, device_type: str, *, keep: Iterable[str] = ()) -> DeviceMesh | None:
        """The device mesh of the enabled dimensions over the current process group.

        Dimensions are ordered ``pp, dp_replicate, dp_shard, cp, sp, tp`` (Accelerate's order with
        the pipeline stages outermost: ``tp``
        innermost, so a tensor-parallel group is neighbouring ranks) and flattened views are
        added: ``dp`` (every data-parallel dimension), ``dp_shard_cp`` and ``dp_cp``. ``None``
        when every size is 1. Needs an initialised process group of ``total_size`` processes.
        ``keep`` names dimensions to build even at size 1 (the ``fsdp`` strategy keeps
        ``dp_shard`` beside ``dp_replicate`` and ``tp``: a replicated model, sharded over groups
        of one). Which dimensions a job trains over is the strategy's to say; the Accelerator's
        ``prepare`` refuses the others.
        """
        from torch.distributed.device_mesh import init_device_mesh

        kept = set(keep)
        names = [n for n in MESH_ORDER if self._sizes[n] > 1 or n in kept]
        if not names:
            return None
        # with ep_size > 1, dp_shard is built as two dimensions and flattened back
        names, sizes, parts = expert_parallel_mesh_layout(names, self._sizes, self.ep_size)
        mesh = init_device_mesh(device_type, sizes, mesh_dim_names=names)
        # sub-meshes are indexed with lists, as Accelerate indexes them (code that records the
        # calls, Accelerate's tests among it, sees the same arguments)
        for flat, dims in (
            ("dp", ("dp_replicate", "dp_shard")),
            ("dp_shard_cp", ("dp_shard", "cp")),
            ("dp_cp", ("dp_replicate", "dp_shard", "cp")),
        ):
            present = [part for n in dims if n in parts for part in parts[n]]
            if present:
                mesh[present]._flatten(flat)
        flatten_expert_parallel_dims(mesh, parts)
        return mesh

    def get_device_mesh(self, device_type: str | None = None) -> DeviceMesh:
        """The mesh, built on first use for ``device_type``.

        Raises ``ValueError`` without a mesh or a device type, or for a different device type
        than the mesh's.
        """
        if self.device_mesh is None:
            if device_type is None:
                raise ValueError("You need to pass a device_type e.g cuda to build the device mesh")
            self.device_mesh = self.build_device_mesh(device_type)
        elif device_type is not None and self.device_mesh.device_type != device_type:
            raise ValueError(
                f"The device_mesh is already created with device type "
                f"{self.device_mesh.device_type}. However, you are trying to get a device mesh "
                f"with device_type {device_type}. Please check if you correctly initialized "
                "your device_mesh"
            )
        if self.device_mesh is None:
            raise ValueError("Every size of this ParallelismConfig is 1: there is no mesh to build")
        return self.device_mesh


def _handler_json(handler: object) -> dict[str, object]:
    """A handler's options as JSON-friendly values (a function by its qualified name)."""
    result: dict[str, object] = {}
    for name, value in vars(handler).items():
        result[name] = getattr(value, "__qualname__", repr(value)) if callable(value) else value
    return result
