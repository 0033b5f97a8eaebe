"""``FullyShardedDataParallelPlugin``: the FSDP settings of a run, as Accelerate 1.15 takes them.

The plugin reads and normalises options into torch's FSDP objects (sharding strategy or
``reshard_after_forward``, offload, prefetch, state dict type, auto-wrap policy, mixed precision);
the FSDP strategy (:class:`~accel_backends.FSDPStrategy`, FSDP2) applies them. Unset fields
come from the launch environment (``ACCEL_STRATEGY_CONFIG`` of ``accel launch``), then
Accelerate's ``FSDP_*`` variables, then Accelerate's defaults: FSDP 1 unless ``fsdp_version=2``
is given.

Differences from Accelerate: ``sync_module_states`` on a machine without accelerators
initialises on CPU (Accelerate raises), and a value that can't be read names its variable.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

from accel_backends.fsdp.options import backward_prefetch, sharding_strategy
from accel_backends.fsdp.plugin_settings import AutoWrapPolicy, FSDPPluginSettings
from accel_backends.launch_settings import LaunchSettings, as_bool, as_int, as_str
from accel_ops import is_torch_version
from accel_ops.constants import FSDP2_PYTORCH_VERSION, FSDP_AUTO_WRAP_POLICY

if TYPE_CHECKING:
    from torch.distributed.fsdp import (
        BackwardPrefetch,
        CPUOffload,
        CPUOffloadPolicy,
        ShardingStrategy,
        StateDictType,
    )

    from accel_backends.fsdp.plugin_settings import MixedPrecisionOption

logger = logging.getLogger(__name__)

#: The version a plugin gets when neither the caller nor the launch sets one (Accelerate's).
DEFAULT_FSDP_VERSION = 1

# Boolean FSDP 1 options read from the launch when unset: field -> launch key.
_FSDP1_FLAGS = {
    "use_orig_params": "fsdp_use_orig_params",
    "sync_module_states": "fsdp_sync_module_states",
    "forward_prefetch": "fsdp_forward_prefetch",
}


@dataclass
class FullyShardedDataParallelPlugin(FSDPPluginSettings):
    """The FSDP settings of a run (fields, defaults and variables of Accelerate 1.15).

    Args:
        fsdp_version: 1 (``FullyShardedDataParallel``, the default) or 2 (``fully_shard``).
        sharding_strategy: FSDP 1's strategy (``FULL_SHARD``, ``SHARD_GRAD_OP``, ``NO_SHARD``,
            ``HYBRID_SHARD``, ``HYBRID_SHARD_ZERO2``); deprecated for ``reshard_after_forward``.
        reshard_after_forward: FSDP 2: free gathered parameters after forward (default true);
            FSDP 1: a sharding strategy.
        backward_prefetch: ``BACKWARD_PRE``, ``BACKWARD_POST`` or ``NO_PREFETCH`` (FSDP 1).
        mixed_precision_policy: ``fp16``/``bf16``/``fp32``, a dict of dtypes, or torch's policy.
        auto_wrap_policy: ``transformer_based_wrap``, ``size_based_wrap``, ``no_wrap`` or a
            callable.
        cpu_offload: offload parameters to CPU (bool or torch's offload object).
        ignored_modules: modules FSDP leaves alone, or a regex matching their names.
        state_dict_type: ``FULL_STATE_DICT`` (FSDP 1 default), ``SHARDED_STATE_DICT`` (FSDP 2
            default) or ``LOCAL_STATE_DICT`` (FSDP 1).
        state_dict_config, optim_state_dict_config: torch's configs (derived from the type).
        limit_all_gathers: FSDP 1 option.
        use_orig_params: FSDP 1 option.
        param_init_fn: FSDP 1 option.
        sync_module_states: FSDP 1 option.
        forward_prefetch: FSDP 1 option.
        activation_checkpointing: recompute activations in backward (default false).
        activation_checkpointing_offload: keep checkpointed inputs on CPU (FSDP 2 only).
        cpu_ram_efficient_loading: only rank 0 loads pretrained weights (default false).
        transformer_cls_names_to_wrap: layer class names for transformer-based wrapping.
        min_num_params: parameter threshold for size-based wrapping.

    Raises:
        ValueError: for options that contradict each other or the FSDP version, and for values
            that can't be read.
        ImportError: for FSDP 2 with torch older than 2.6.
    """

    fsdp_version: int | None = None  # type: ignore[assignment]
    sharding_strategy: str | int | ShardingStrategy | None = None
    reshard_after_forward: str | bool | ShardingStrategy | None = None
    backward_prefetch: str | int | BackwardPrefetch | None = None
    mixed_precision_policy: MixedPrecisionOption | None = None
    auto_wrap_policy: (
        AutoWrapPolicy | Literal["transformer_based_wrap", "size_based_wrap", "no_wrap"] | None
    ) = None
    cpu_offload: bool | CPUOffload | CPUOffloadPolicy | None = None
    ignored_modules: Iterable[torch.nn.Module] | str | None = None
    state_dict_type: str | int | StateDictType | None = None
    state_dict_config: object = None
    optim_state_dict_config: object = None
    limit_all_gathers: bool = True
    use_orig_params: bool | None = None
    param_init_fn: Callable[[torch.nn.Module], torch.nn.Module | None] | None = None
    sync_module_states: bool | None = None
    forward_prefetch: bool | None = None
    activation_checkpointing: bool | None = None
    activation_checkpointing_offload: bool | None = None
    cpu_ram_efficient_loading: bool | None = None
    transformer_cls_names_to_wrap: list[str] | None = None
    min_num_params: int | None = None

    def __post_init__(self) -> None:
        settings = LaunchSettings("fsdp")
        notes: set[str] = set()
        if self.fsdp_version is None:
            found = settings.get("fsdp_version")
            self.fsdp_version = DEFAULT_FSDP_VERSION if found is None else as_int(found)
        if self.fsdp_version not in (1, 2):
            raise ValueError(f"fsdp_version must be 1 or 2, got {self.fsdp_version!r}")
        if self.fsdp_version == 2 and not is_torch_version(">=", FSDP2_PYTORCH_VERSION):
            raise ImportError(f"FSDP2 requires PyTorch >= {FSDP2_PYTORCH_VERSION}")
        self._settle_sharding(settings, notes)
        if self.cpu_offload is None:
            found = settings.get("fsdp_offload_params")
            self.cpu_offload = False if found is None else as_bool(found)
        self.set_cpu_offload()
        self.validate_cpu_offload()
        self._settle_prefetch(settings, notes)
        self.set_state_dict_type()
        self._settle_auto_wrap(settings)
        self._settle_fsdp1_flags(settings, notes)
        self._settle_checkpointing(settings)
        if self.ignored_modules is None:
            found = settings.get("fsdp_ignored_modules", "FSDP_IGNORED_MODULES")
            self.ignored_modules = None if found is None else as_str(found)
        self._settle_ram_efficient_loading(settings)
        if isinstance(self.mixed_precision_policy, str):
            self.set_mixed_precision(self.mixed_precision_policy, override=True)
        elif isinstance(self.mixed_precision_policy, dict):
            self.set_mixed_precision(self.mixed_precision_policy)
        if self.mixed_precision_policy is not None:
            self.validate_mixed_precision_policy()
        if self.sync_module_states:
            device = _current_device()
            self.param_init_fn = lambda module: module.to_empty(device=device, recurse=False)
        old_torch = not is_torch_version(">=", "2.7.0")
        if self.fsdp_version == 2 and self.ignored_modules is not None and old_torch:
            notes.add("FSDP2 ignored_modules needs torch >= 2.7.0; setting it to None.")
            self.ignored_modules = None
        if notes:
            version = self.fsdp_version
            logger.warning("FSDP%s settings:\n%s", version, "\n".join(sorted(notes)))

    def _settle_sharding(self, settings: LaunchSettings, notes: set[str]) -> None:
        if self.sharding_strategy is not None:
            notes.add("sharding_strategy is deprecated in favor of reshard_after_forward.")
        if self.fsdp_version == 1:
            if self.sharding_strategy is None:
                found = settings.get("fsdp_sharding_strategy")
                self.sharding_strategy = "FULL_SHARD" if found is None else as_str(found)
            self.sharding_strategy = sharding_strategy(self.sharding_strategy)
        if self.reshard_after_forward is None and self.sharding_strategy is None:
            found = settings.get("fsdp_reshard_after_forward")
            self.reshard_after_forward = "true" if found is None else found.value  # type: ignore[assignment]
        value = self.reshard_after_forward
        if isinstance(value, str):
            if self.fsdp_version == 2:
                self.reshard_after_forward = as_bool_text(value, "reshard_after_forward")
            else:
                self.reshard_after_forward = sharding_strategy(value)
        if self.fsdp_version == 2 and not isinstance(self.reshard_after_forward, bool):
            raise ValueError(
                f"reshard_after_forward set to {self.reshard_after_forward}. This is not "
                "supported with FSDP2, please set to a `bool` (sharding_strategy is FSDP1's; "
                "reshard_after_forward=True is FULL_SHARD, False is SHARD_GRAD_OP)"
            )
        if self.fsdp_version == 1 and isinstance(self.reshard_after_forward, bool):
            raise ValueError(
                f"reshard_after_forward set to {self.reshard_after_forward}. This is not "
                "supported with FSDP1, please set to a `str` or an instance of "
                "`torch.distributed.fsdp.ShardingStrategy`"
            )

    def _settle_prefetch(self, settings: LaunchSettings, notes: set[str]) -> None:
        if self.backward_prefetch is None:
            found = settings.get("fsdp_backward_prefetch") or settings.get(
                "fsdp_backward_prefetch_policy"
            )
            self.backward_prefetch = None if found is None else as_str(found)
        self.backward_prefetch = backward_prefetch(self.backward_prefetch)
        if self.fsdp_version == 2 and self.backward_prefetch is not None:
            notes.add("backward_prefetch is not supported in FSDP2; setting it to None.")
            self.backward_prefetch = None

    def _settle_auto_wrap(self, settings: LaunchSettings) -> None:
        if self.auto_wrap_policy is None:
            found = settings.get("fsdp_auto_wrap_policy")
            self.auto_wrap_policy = "NO_WRAP" if found is None else as_str(found)  # type: ignore[assignment]
        if not isinstance(self.auto_wrap_policy, str):
            return
        from torch.distributed.fsdp.wrap import (
            size_based_auto_wrap_policy,
            transformer_auto_wrap_policy,
        )

        name = self.auto_wrap_policy.upper()
        if name not in FSDP_AUTO_WRAP_POLICY:
            raise ValueError(
                f"Invalid auto wrap policy: {self.auto_wrap_policy}. Must be one of "
                f"{FSDP_AUTO_WRAP_POLICY}"
            )
        if name == "TRANSFORMER_BASED_WRAP":
            self.auto_wrap_policy = transformer_auto_wrap_policy
            if self.transformer_cls_names_to_wrap is None:
                found = settings.get("fsdp_transformer_layer_cls_to_wrap")
                if found is not None:
                    self.transformer_cls_names_to_wrap = as_str(found).split(",")
            elif isinstance(self.transformer_cls_names_to_wrap, str):
                self.transformer_cls_names_to_wrap = self.transformer_cls_names_to_wrap.split(",")
        elif name == "SIZE_BASED_WRAP":
            self.auto_wrap_policy = size_based_auto_wrap_policy
            if self.min_num_params is None:
                found = settings.get("fsdp_min_num_params")
                self.min_num_params = 0 if found is None else as_int(found)
            elif not isinstance(self.min_num_params, int) or isinstance(self.min_num_params, bool):
                raise ValueError(
                    f"`min_num_params` must be an integer. Got {self.min_num_params} of type "
                    f"{type(self.min_num_params)}"
                )
        else:
            self.auto_wrap_policy = None

    def _settle_fsdp1_flags(self, settings: LaunchSettings, notes: set[str]) -> None:
        for field, key in _FSDP1_FLAGS.items():
            value = getattr(self, field)
            if value is None and self.fsdp_version == 1:
                found = settings.get(key)
                setattr(self, field, False if found is None else as_bool(found))
            elif value is not None and self.fsdp_version == 2:
                if field == "forward_prefetch":
                    raise ValueError(
                        "forward_prefetch is not yet implemented in FSDP2, set to None or use "
                        "`fsdp_version=1`"
                    )
                notes.add(f"{field} is obsolete in FSDP2; setting it to None.")
                setattr(self, field, None)

    def _settle_checkpointing(self, settings: LaunchSettings) -> None:
        if self.activation_checkpointing is None:
            found = settings.get("fsdp_activation_checkpointing")
            self.activation_checkpointing = False if found is None else as_bool(found)
        if self.activation_checkpointing_offload is None:
            found = settings.get(
                "fsdp_activation_checkpointing_offload", "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD"
            )
            self.activation_checkpointing_offload = False if found is None else as_bool(found)
        if self.activation_checkpointing_offload and not self.activation_checkpointing:
            raise ValueError(
                "`activation_checkpointing_offload=True` requires `activation_checkpointing=True`."
            )
        if self.activation_checkpointing_offload and self.fsdp_version != 2:
            raise ValueError("`activation_checkpointing_offload=True` requires `fsdp_version=2`.")

    def _settle_ram_efficient_loading(self, settings: LaunchSettings) -> None:
        if self.cpu_ram_efficient_loading is None:
            found = settings.get("fsdp_cpu_ram_efficient_loading")
            self.cpu_ram_efficient_loading = False if found is None else as_bool(found)
        else:
            # transformers' from_pretrained reads this variable to load on rank 0 only.
            os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = str(self.cpu_ram_efficient_loading)
        if (
            self.fsdp_version == 1
            and self.cpu_ram_efficient_loading
            and not self.sync_module_states
        ):
            warnings.warn(
                "sync_module_states cannot be False since efficient cpu ram loading enabled. "
                "Setting sync_module_states to True.",
                stacklevel=4,
            )
            self.sync_module_states = True


def as_bool_text(text: str, field: str) -> bool:
    """``text`` (``true``/``false``...) as a boolean, or a ``ValueError`` naming ``field``."""
    from accel_base.env_values import parse_bool

    try:
        return parse_bool(text)
    except ValueError as error:
        raise ValueError(f"{field}={text!r} is not valid for FSDP2; expected {error}") from None


def _current_device() -> torch.device:
    """The device this process initialises meta parameters on: its accelerator, else CPU."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        kind = accelerator.current_accelerator()
        return torch.device(kind.type, accelerator.current_device_index())
    return torch.device("cpu")


def refuse_local_state_dict(plugin: FullyShardedDataParallelPlugin, what: str) -> None:
    """Raise ``ValueError`` for FSDP1's ``LOCAL_STATE_DICT``, which ``what`` can't write."""
    from torch.distributed.fsdp import StateDictType

    if plugin.state_dict_type == StateDictType.LOCAL_STATE_DICT:
        raise ValueError(
            f"{what} writes SHARDED_STATE_DICT (each process's shards, loadable on any number of "
            "processes) or FULL_STATE_DICT checkpoints; LOCAL_STATE_DICT is not supported: set "
            "state_dict_type (fsdp_state_dict_type) to SHARDED_STATE_DICT."
        )
