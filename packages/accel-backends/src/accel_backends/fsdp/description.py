"""How the ``fsdp`` engine describes itself (torch-free: ``accel launch`` reads it).

See :class:`accel_core.engine_description.EngineDescription`.
"""

from __future__ import annotations

from accel_core.engine_description import ConfigKey, EngineDescription, LaunchOption
from accel_core.mesh_dimension import DP_REPLICATE, DP_SHARD, TP

FSDP_SHARDING_STRATEGIES = (
    "FULL_SHARD",
    "SHARD_GRAD_OP",
    "NO_SHARD",
    "HYBRID_SHARD",
    "HYBRID_SHARD_ZERO2",
)
FSDP_AUTO_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
FSDP_BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
FSDP_STATE_DICT_TYPES = ("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT")

_LAUNCH_OPTIONS: tuple[LaunchOption, ...] = (
    LaunchOption("fsdp_version", "FSDP API version.", kind="int", choices=(1, 2)),
    LaunchOption(
        "fsdp_sharding_strategy", "FSDP 1 sharding strategy.", choices=FSDP_SHARDING_STRATEGIES
    ),
    LaunchOption(
        "fsdp_reshard_after_forward", "FSDP 2: free parameters after forward (true/false)."
    ),
    LaunchOption(
        "fsdp_offload_params", "Offload parameters and gradients to CPU (true/false).", kind="bool"
    ),
    LaunchOption(
        "fsdp_min_num_params", "Minimum parameters per unit (SIZE_BASED_WRAP).", kind="int"
    ),
    LaunchOption(
        "fsdp_auto_wrap_policy", "How modules are wrapped.", choices=FSDP_AUTO_WRAP_POLICIES
    ),
    LaunchOption(
        "fsdp_transformer_layer_cls_to_wrap", "Comma-separated layer class names to wrap."
    ),
    LaunchOption("fsdp_backward_prefetch", "Backward prefetch.", choices=FSDP_BACKWARD_PREFETCH),
    LaunchOption("fsdp_state_dict_type", "Checkpoint layout.", choices=FSDP_STATE_DICT_TYPES),
    LaunchOption("fsdp_forward_prefetch", "Forward prefetch (true/false).", kind="bool"),
    LaunchOption("fsdp_use_orig_params", "Keep original parameters (true/false).", kind="bool"),
    LaunchOption(
        "fsdp_cpu_ram_efficient_loading", "Load weights on rank 0 only (true/false).", kind="bool"
    ),
    LaunchOption(
        "fsdp_sync_module_states", "Broadcast rank 0's weights at wrap (true/false).", kind="bool"
    ),
    LaunchOption(
        "fsdp_activation_checkpointing", "Activation checkpointing (true/false).", kind="bool"
    ),
)

_CONFIG_KEYS: dict[str, ConfigKey] = {
    "fsdp_backward_prefetch_policy": ConfigKey(
        "str", "older name of fsdp_backward_prefetch", choices=FSDP_BACKWARD_PREFETCH
    ),
}

DESCRIPTION = EngineDescription(
    name="fsdp",
    title="FSDP",
    # FSDPStrategy(...) returns FSDP1Strategy or FSDP2Strategy, as the plugin's fsdp_version says
    strategy="accel_backends.fsdp.strategy:FSDPStrategy",
    install="accel-backends",
    distributed_type="FSDP",
    launch_flag="use_fsdp",
    launch_options=_LAUNCH_OPTIONS,
    config_section="fsdp_config",
    config_keys=_CONFIG_KEYS,
    plugin_keywords=("fsdp_plugin",),
    plugin_class="accel_backends.fsdp.plugin:FullyShardedDataParallelPlugin",
    dimensions=(DP_REPLICATE, DP_SHARD, TP),
    shards_by_default=True,
    wrapper_classes=("FullyShardedDataParallel",),
    parallelism_config_class="accel_backends.parallelism_config:ParallelismConfig",
    checkpoint_layouts=("accel_backends.fsdp.checkpoint_files:find_layout",),
)
