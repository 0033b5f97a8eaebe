"""FSDP1 (:class:`FSDP1Strategy`): the model inside ``FullyShardedDataParallel``
(:mod:`accel_backends.fsdp.v1_wrapping`), its optimizer re-pointed at the wrapper's parameters,
clipping and ``no_sync`` through the wrapper."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from accel_backends.fsdp import v1_wrapping
from accel_backends.fsdp.accumulation import FSDP1Accumulation
from accel_backends.fsdp.common import FSDPStrategy, state_dict_options
from accel_backends.fsdp.sharding import match_renamed_parameters

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.distributed.device_mesh import DeviceMesh

    from accel_backends.fsdp.mesh import FSDPMeshes
    from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin
    from accel_core.kwargs_handlers import KwargsHandler
    from accel_core.strategies.parameters import ParameterMap


class FSDP1Strategy(FSDPStrategy):
    """FSDP1: the model inside ``FullyShardedDataParallel`` (which ``prepare`` returns) with the
    plugin's sharding strategy (hybrid included) and options; clipping and ``no_sync`` through
    the wrapper."""

    fsdp_version: ClassVar[int] = 1

    def __init__(
        self,
        kwargs_handlers: Sequence[KwargsHandler] = (),
        plugin: FullyShardedDataParallelPlugin | None = None,
        **options: Any,
    ) -> None:
        super().__init__(kwargs_handlers, plugin, **options)
        # wrapped model -> ids of the parameters it had before wrapping (its optimizer's, then)
        self._originals: weakref.WeakKeyDictionary[torch.nn.Module, set[int]] = (
            weakref.WeakKeyDictionary()
        )
        self.accumulation = FSDP1Accumulation(self)

    def _shard_mesh(self, meshes: FSDPMeshes, num_processes: int) -> DeviceMesh | None:
        if meshes.tp is not None or meshes.shard is None:
            raise ValueError(
                "tensor parallelism (ParallelismConfig(tp_size > 1)) runs with FSDP version 2: "
                "set fsdp_version=2 on the FullyShardedDataParallelPlugin (or --fsdp_version 2)"
            )
        return v1_wrapping.fsdp1_mesh(self.plugin, meshes.shard, meshes.config, num_processes)

    def _is_set_up(self, module: torch.nn.Module) -> bool:
        return v1_wrapping.state_dict_root(module) is not None

    def _shard(
        self,
        model: torch.nn.Module,
        inner: torch.nn.Module,
        before: list[tuple[str, torch.nn.Parameter]],
        *,
        upcast_to_fp32: bool,
    ) -> torch.nn.Module:
        assert self.mesh is not None  # _shard_mesh refuses a run with nothing to shard over
        wrapped = v1_wrapping.wrap_model(
            inner, self.plugin, self.mesh, self.device, upcast_to_fp32=upcast_to_fp32
        )
        self._replaced.update(match_renamed_parameters(before, inner))
        self._originals[wrapped] = {id(parameter) for _, parameter in before}
        self._models.add(wrapped)
        return wrapped

    def setup_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        parameter_map: ParameterMap,
        *,
        device_placement: bool,
    ) -> torch.optim.Optimizer:
        """As FSDP2's; without ``use_orig_params`` the optimizer is first re-pointed at the
        flat parameters."""
        self._point_at_flat_parameters(optimizer)
        return super().setup_optimizer(optimizer, parameter_map, device_placement=device_placement)

    def _point_at_flat_parameters(self, optimizer: torch.optim.Optimizer) -> None:
        if self.plugin.use_orig_params:
            return  # the parameters' views: the name matching of ``setup`` follows them
        stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for model, originals in self._originals.items():
            if stepped & originals:
                flat = [p for p in model.parameters() if p.requires_grad]
                v1_wrapping.point_at_flat_parameters(optimizer, flat)
                return

    def clip_gradients_norm(
        self,
        module: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        parameters: Iterable[torch.nn.Parameter] | None = None,
    ) -> torch.Tensor:
        """The wrapper's ``clip_grad_norm_`` (it reduces its shards' norms), or FSDP2's way for
        anything that is no wrapped model."""
        root = v1_wrapping.state_dict_root(module) if module is not None else None
        if root is not None:
            return root.clip_grad_norm_(max_norm, norm_type)
        return super().clip_gradients_norm(
            module, optimizer, max_norm, norm_type, parameters=parameters
        )

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[object]:
        """The wrapper's ``no_sync``: gradients accumulate unreduced until the next synchronising
        backward."""
        root = v1_wrapping.state_dict_root(model)
        return root.no_sync() if root is not None else contextlib.nullcontext()  # type: ignore[operator]

    def _options(
        self, *, full: bool, cpu_offload: bool = False, strict: bool = True
    ) -> StateDictOptions:
        """On a CPU run full state dicts are gathered without ``cpu_offload`` (torch's FSDP1
        offload path fails on CPU tensors)."""
        if self.device.type == "cpu":
            cpu_offload = False
        return state_dict_options(full=full, cpu_offload=cpu_offload, strict=strict)


__all__ = ["FSDP1Strategy"]
