"""The parts of ``FullyShardedDataParallelPlugin`` that turn options into torch's FSDP objects.

Mixed into :class:`~accel_backends.fsdp.plugin.FullyShardedDataParallelPlugin`: the state dict
type and its configs, the auto-wrap policy for a given model, the mixed-precision policy and the
CPU offload policy, for FSDP 1 (``torch.distributed.fsdp.FullyShardedDataParallel``) or FSDP 2
(``fully_shard``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import torch

from accel_backends.fsdp.options import MIXED_PRECISION_DTYPES
from accel_backends.fsdp.options import state_dict_type as state_dict_type_of
from accel_backends.launch_settings import LaunchSettings, as_str
from accel_core.module_inspection import get_module_class_from_name

if TYPE_CHECKING:
    from torch.distributed.fsdp import (
        CPUOffload,
        CPUOffloadPolicy,
        MixedPrecision,
        MixedPrecisionPolicy,
        ShardingStrategy,
        StateDictType,
    )

    #: ``mixed_precision_policy`` as given, or torch's policy object once set.
    MixedPrecisionOption = (
        dict[str, torch.dtype] | str | torch.dtype | MixedPrecision | MixedPrecisionPolicy
    )

#: An auto-wrap policy as FSDP 1 takes it (``torch.distributed.fsdp.wrap``).
AutoWrapPolicy = Callable[..., bool]


class FSDPPluginSettings:
    """State dict, wrapping, precision and offload settings of an FSDP plugin."""

    fsdp_version: int
    sharding_strategy: str | int | ShardingStrategy | None
    reshard_after_forward: str | bool | ShardingStrategy | None
    state_dict_type: str | int | StateDictType | None
    state_dict_config: object
    optim_state_dict_config: object
    auto_wrap_policy: AutoWrapPolicy | str | None
    transformer_cls_names_to_wrap: list[str] | None
    min_num_params: int | None
    mixed_precision_policy: MixedPrecisionOption | None
    cpu_offload: bool | CPUOffload | CPUOffloadPolicy | None
    ignored_modules: Iterable[torch.nn.Module] | str | None

    def set_state_dict_type(self, state_dict_type: str | int | StateDictType | None = None) -> None:
        """Set the state dict type (``state_dict_type`` if given) and the matching configs.

        Unset, it is ``FSDP_STATE_DICT_TYPE`` (or the launch's ``fsdp_state_dict_type``), else
        ``FULL_STATE_DICT`` for FSDP 1 and ``SHARDED_STATE_DICT`` for FSDP 2. Full state dicts
        are gathered to rank 0 on CPU. Raises ``ValueError`` for ``LOCAL_STATE_DICT`` with FSDP 2.
        """
        from torch.distributed.fsdp import (
            FullOptimStateDictConfig,
            FullStateDictConfig,
            ShardedOptimStateDictConfig,
            ShardedStateDictConfig,
            StateDictType,
        )

        if state_dict_type is not None:
            self.state_dict_type = state_dict_type
        if self.state_dict_type is None:
            found = LaunchSettings("fsdp").get("fsdp_state_dict_type")
            default = "FULL_STATE_DICT" if self.fsdp_version == 1 else "SHARDED_STATE_DICT"
            self.state_dict_type = default if found is None else as_str(found)
        kind = state_dict_type_of(self.state_dict_type)
        self.state_dict_type = kind
        if kind == StateDictType.FULL_STATE_DICT:
            if self.state_dict_config is None:
                self.state_dict_config = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
            if self.optim_state_dict_config is None:
                self.optim_state_dict_config = FullOptimStateDictConfig(
                    offload_to_cpu=True, rank0_only=True
                )
        elif kind == StateDictType.SHARDED_STATE_DICT:
            if self.state_dict_config is None:
                self.state_dict_config = ShardedStateDictConfig(offload_to_cpu=True)
            if self.optim_state_dict_config is None:
                self.optim_state_dict_config = ShardedOptimStateDictConfig(offload_to_cpu=True)
        if self.fsdp_version == 2 and kind == StateDictType.LOCAL_STATE_DICT:
            raise ValueError(
                "FSDP2 does not support LOCAL_STATE_DICT. Please set `fsdp_state_dict_type` to "
                "`SHARDED_STATE_DICT` or `FULL_STATE_DICT`."
            )

    def set_auto_wrap_policy(self, model: torch.nn.Module) -> None:
        """Bind the auto-wrap policy to ``model``: its layer classes, or the size threshold.

        Transformer-based wrapping uses ``transformer_cls_names_to_wrap``, else the model's
        ``_no_split_modules``; a name not found in ``model`` is a ``ValueError``. Size-based
        wrapping with ``min_num_params`` 0 wraps nothing (the policy becomes ``None``).
        """
        from torch.distributed.fsdp.wrap import (
            size_based_auto_wrap_policy,
            transformer_auto_wrap_policy,
        )

        if self.auto_wrap_policy is transformer_auto_wrap_policy:
            if self.transformer_cls_names_to_wrap is None:
                self.transformer_cls_names_to_wrap = list(
                    getattr(model, "_no_split_modules", None) or []
                )
            classes = set()
            for name in self.transformer_cls_names_to_wrap:
                found = get_module_class_from_name(model, name)
                if found is None:
                    raise ValueError(
                        f"Could not find the transformer layer class {name} in the model."
                    )
                classes.add(found)
            self.auto_wrap_policy = functools.partial(
                transformer_auto_wrap_policy, transformer_layer_cls=classes
            )
        elif self.auto_wrap_policy is size_based_auto_wrap_policy:
            if self.min_num_params:
                self.auto_wrap_policy = functools.partial(
                    size_based_auto_wrap_policy, min_num_params=self.min_num_params
                )
            else:
                self.auto_wrap_policy = None

    def set_mixed_precision(
        self,
        mixed_precision: str | torch.dtype | dict[str, torch.dtype],
        buffer_autocast: bool = False,
        override: bool = False,
    ) -> None:
        """Set the mixed-precision policy from ``fp16``/``bf16``/``fp32`` (``fp8`` computes in
        bf16) or a dtype; or build it from a dict of dtypes.

        Without ``override`` an existing policy object is kept. ``buffer_autocast`` keeps FSDP 1
        buffers in fp32. Raises ``ValueError`` for an unknown precision or an incomplete dict.
        """
        dtype: torch.dtype | None = None
        if isinstance(mixed_precision, str):
            dtype = MIXED_PRECISION_DTYPES.get(mixed_precision)
            if dtype is None:
                raise ValueError(
                    f"Invalid mixed precision: {mixed_precision}. Must be one of "
                    f"{list(MIXED_PRECISION_DTYPES)}"
                )
        elif isinstance(mixed_precision, torch.dtype):
            if mixed_precision not in MIXED_PRECISION_DTYPES.values():
                raise ValueError(
                    f"Invalid mixed precision: {mixed_precision}. Must be one of "
                    f"{list(MIXED_PRECISION_DTYPES.values())}"
                )
            dtype = mixed_precision
        policy_class = _mixed_precision_class(self.fsdp_version)
        if override or self.mixed_precision_policy is None:
            if dtype is None:
                raise ValueError(f"Invalid mixed precision: {mixed_precision!r}")
            extra = "buffer_dtype" if self.fsdp_version == 1 else "output_dtype"
            other = torch.float32 if buffer_autocast and self.fsdp_version == 1 else dtype
            self.mixed_precision_policy = policy_class(
                param_dtype=dtype, reduce_dtype=dtype, **{extra: other}
            )
        elif isinstance(self.mixed_precision_policy, dict):
            policy = self.mixed_precision_policy
            keys = ["param_dtype", "reduce_dtype"]
            keys.append("buffer_dtype" if self.fsdp_version == 1 else "output_dtype")
            missing = [key for key in keys if key not in policy]
            invalid = [k for k, v in policy.items() if v not in MIXED_PRECISION_DTYPES.values()]
            if missing or invalid:
                raise ValueError(
                    f"Invalid mixed precision policy: {policy}. Must be a `dict` with keys "
                    f"{keys}. Values must be one of {list(MIXED_PRECISION_DTYPES.values())}"
                )
            self.mixed_precision_policy = policy_class(**policy)

    def validate_mixed_precision_policy(self) -> None:
        """Raise ``ValueError`` unless the policy is torch's object for this FSDP version."""
        policy_class = _mixed_precision_class(self.fsdp_version)
        if not isinstance(self.mixed_precision_policy, policy_class):
            required = (
                "`torch.distributed.fsdp.MixedPrecisionPolicy`"
                if self.fsdp_version == 2
                else "`torch.distributed.fsdp.MixedPrecision`"
            )
            raise ValueError(f"mixed_precision_policy must be an instance of {required}.")

    def set_cpu_offload(self) -> None:
        """Turn a boolean ``cpu_offload`` into torch's offload object for this FSDP version."""
        if not isinstance(self.cpu_offload, bool):
            return
        if self.fsdp_version == 2:
            from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy

            self.cpu_offload = CPUOffloadPolicy() if self.cpu_offload else OffloadPolicy()
        else:
            from torch.distributed.fsdp import CPUOffload

            self.cpu_offload = CPUOffload(offload_params=self.cpu_offload)

    def validate_cpu_offload(self) -> None:
        """Raise ``ValueError`` unless ``cpu_offload`` is torch's object for this FSDP version."""
        if self.fsdp_version == 2:
            from torch.distributed.fsdp import OffloadPolicy

            if not isinstance(self.cpu_offload, OffloadPolicy):
                raise ValueError(
                    "`cpu_offload` must be an instance of `torch.distributed.fsdp.OffloadPolicy` "
                    f"in FSDP2, got {self.cpu_offload}"
                )
        else:
            from torch.distributed.fsdp import CPUOffload

            if not isinstance(self.cpu_offload, CPUOffload):
                raise ValueError(
                    "`cpu_offload` must be an instance of `torch.distributed.fsdp.CPUOffload` in "
                    f"FSDP1, got {self.cpu_offload}"
                )


def _mixed_precision_class(version: int) -> type:
    if version == 2:
        from torch.distributed.fsdp import MixedPrecisionPolicy

        return MixedPrecisionPolicy
    from torch.distributed.fsdp import MixedPrecision

    return MixedPrecision
