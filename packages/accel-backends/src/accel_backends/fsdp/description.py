"""How the ``fsdp`` engine describes itself (torch-free: ``accel launch`` reads it).

See :class:`accel_base.engine_description.EngineDescription`. Accelerate's older files give
``fsdp_sharding_strategy`` by number (1 = ``FULL_SHARD``) and call ``fsdp_backward_prefetch``
``fsdp_backward_prefetch_policy``; both are still read.
"""

from __future__ import annotations

from dataclasses import replace

from accel_base.config_question import ConfigQuestion
from accel_base.engine_description import EngineDescription, LaunchOption
from accel_base.mesh_dimension import DP_REPLICATE, DP_SHARD, TP, MeshDimension
from accel_ops.constants import (  # Accelerate's lists (torch-free module), defined once there
    FSDP_AUTO_WRAP_POLICY,
    FSDP_BACKWARD_PREFETCH,
    FSDP_SHARDING_STRATEGY,
    FSDP_STATE_DICT_TYPE,
)

_LAUNCH_OPTIONS: tuple[LaunchOption, ...] = (
    LaunchOption(
        "fsdp_version",
        "FSDP API version.",
        kind="int",
        choices=(1, 2),
        accelerate_env="FSDP_VERSION",
    ),
    LaunchOption(
        "fsdp_sharding_strategy",
        "FSDP 1 sharding strategy.",
        choices=tuple(FSDP_SHARDING_STRATEGY),
        numbered_choices=True,
        accelerate_env="FSDP_SHARDING_STRATEGY",
    ),
    LaunchOption(
        "fsdp_reshard_after_forward",
        "FSDP 2: free parameters after forward (true/false).",
        accelerate_env="FSDP_RESHARD_AFTER_FORWARD",
        accelerate_reading="bool_or_text",
    ),
    LaunchOption(
        "fsdp_offload_params",
        "Offload parameters and gradients to CPU (true/false).",
        kind="bool",
        accelerate_env="FSDP_OFFLOAD_PARAMS",
    ),
    LaunchOption(
        "fsdp_min_num_params",
        "Minimum parameters per unit (SIZE_BASED_WRAP).",
        kind="int",
        accelerate_env="FSDP_MIN_NUM_PARAMS",
    ),
    LaunchOption(
        "fsdp_auto_wrap_policy",
        "How modules are wrapped.",
        choices=tuple(FSDP_AUTO_WRAP_POLICY),
        accelerate_env="FSDP_AUTO_WRAP_POLICY",
    ),
    LaunchOption(
        "fsdp_transformer_layer_cls_to_wrap",
        "Comma-separated layer class names to wrap.",
        accelerate_env="FSDP_TRANSFORMER_CLS_TO_WRAP",
        accelerate_reading="optional",
    ),
    LaunchOption(
        "fsdp_backward_prefetch",
        "Backward prefetch.",
        choices=tuple(FSDP_BACKWARD_PREFETCH),
        accelerate_env="FSDP_BACKWARD_PREFETCH",
    ),
    LaunchOption(
        "fsdp_state_dict_type",
        "Checkpoint layout.",
        choices=tuple(FSDP_STATE_DICT_TYPE),
        accelerate_env="FSDP_STATE_DICT_TYPE",
    ),
    LaunchOption(
        "fsdp_forward_prefetch",
        "Forward prefetch (true/false).",
        kind="bool",
        accelerate_env="FSDP_FORWARD_PREFETCH",
    ),
    LaunchOption(
        "fsdp_use_orig_params",
        "Keep original parameters (true/false).",
        kind="bool",
        accelerate_env="FSDP_USE_ORIG_PARAMS",
    ),
    LaunchOption(
        "fsdp_cpu_ram_efficient_loading",
        "Load weights on rank 0 only (true/false).",
        kind="bool",
        accelerate_env="FSDP_CPU_RAM_EFFICIENT_LOADING",
    ),
    LaunchOption(
        "fsdp_sync_module_states",
        "Broadcast rank 0's weights at wrap (true/false).",
        kind="bool",
        accelerate_env="FSDP_SYNC_MODULE_STATES",
    ),
    LaunchOption(
        "fsdp_activation_checkpointing",
        "Activation checkpointing (true/false).",
        kind="bool",
        accelerate_env="FSDP_ACTIVATION_CHECKPOINTING",
    ),
)

_CONFIG_QUESTIONS: tuple[ConfigQuestion, ...] = (
    ConfigQuestion("fsdp_version", "Which FSDP version?", choices=(2, 1), default=2),
    ConfigQuestion(
        "fsdp_reshard_after_forward",
        "Free parameters after forward (reshard_after_forward)?",
        kind="confirm",
        default=True,
        when={"fsdp_version": (2,)},
    ),
    ConfigQuestion(
        "fsdp_sharding_strategy",
        "Which sharding strategy?",
        default="FULL_SHARD",
        when={"fsdp_version": (1,)},
    ),
    ConfigQuestion(
        "fsdp_offload_params",
        "Offload parameters and gradients to CPU?",
        kind="confirm",
        default=False,
    ),
    ConfigQuestion(
        "fsdp_auto_wrap_policy", "How should modules be wrapped?", default="TRANSFORMER_BASED_WRAP"
    ),
    ConfigQuestion(
        "fsdp_transformer_layer_cls_to_wrap",
        "Layer class names to wrap, comma-separated (empty: the model's _no_split_modules):",
        kind="text",
        default="",
        when={"fsdp_auto_wrap_policy": ("TRANSFORMER_BASED_WRAP",)},
        omit_empty=True,
    ),
    ConfigQuestion(
        "fsdp_min_num_params",
        "Minimum parameters per unit?",
        kind="integer",
        default=100000000,
        minimum=1,
        when={"fsdp_auto_wrap_policy": ("SIZE_BASED_WRAP",)},
    ),
    ConfigQuestion("fsdp_state_dict_type", "Checkpoint layout?", default="SHARDED_STATE_DICT"),
    ConfigQuestion(
        "fsdp_cpu_ram_efficient_loading",
        "Load weights on rank 0 only?",
        kind="confirm",
        default=True,
    ),
    ConfigQuestion(
        "fsdp_activation_checkpointing",
        "Use activation checkpointing?",
        kind="confirm",
        default=False,
    ),
)

# The dimensions it trains over, each with how to choose this engine for it: the reason another
# strategy's refusal of the dimension gives.
_DP_SHARD = replace(
    DP_SHARD,
    why_not=(
        "leave the choice to the configuration (no strategy=, plugin or ACCEL_STRATEGY; FSDP2 is "
        "chosen), pass fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2) or launch "
        "with `accel launch --use_fsdp`; or set dp_shard_size=1"
    ),
)
_TP = replace(
    TP,
    why_not=(
        "tensor parallelism runs under the fsdp strategy of accel-backends (it is chosen when no "
        "strategy is named, or pass fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))"
    ),
)
#: Expert parallelism: the experts of a mixture-of-experts model split over ``ep`` processes
#: borrowed from ``dp_shard`` (torchtitan's ``expert_parallel_degree``, transformers'
#: ``DistributedConfig(ep_size=...)``): see :mod:`accel_backends.expert_parallel`.
EP = MeshDimension(
    name="ep",
    config_key="ep_size",
    order=1,
    shards_data=True,
    title="Expert parallelism",
    description="processes each MoE layer's experts are split over (divides dp_shard_size)",
    why_not=(
        "expert parallelism runs under the fsdp strategy of accel-backends (it is chosen when no "
        "strategy is named, or pass fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))"
    ),
    launch_option="parallelism_config_ep_size",
    borrows_from="dp_shard",
)

#: Pipeline stages: declared by this engine alone (Accelerate's ParallelismConfig has no such
#: size; transformers' ``DistributedConfig(pp_size=...)`` names it so). Outermost (``order``
#: below 0): each stage's processes are a whole data-parallel mesh of their own.
PP = MeshDimension(
    name="pp",
    config_key="pp_size",
    order=-1,
    shards_data=False,
    title="Pipeline parallelism",
    description="pipeline stages the model is split into",
    why_not=(
        "pipeline parallelism runs under the fsdp strategy of accel-backends (it is chosen when "
        "no strategy is named, or pass fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))"
    ),
    launch_option="parallelism_config_pp_size",
    strategy_builds_mesh=True,
)

DESCRIPTION = EngineDescription(
    name="fsdp",
    title="FSDP",
    # the factory returns FSDP1Strategy or FSDP2Strategy, as the plugin's fsdp_version says
    strategy="accel_backends.fsdp.strategy:create_fsdp_strategy",
    install="accel-backends",
    distributed_type="FSDP",
    launch_flag="use_fsdp",
    launch_options=_LAUNCH_OPTIONS,
    config_section="fsdp_config",
    plugin_keywords=("fsdp_plugin",),
    plugin_class="accel_backends.fsdp.plugin:FullyShardedDataParallelPlugin",
    dimensions=(PP, DP_REPLICATE, _DP_SHARD, _TP, EP),
    shards_by_default=True,
    wrapper_classes=("FullyShardedDataParallel",),
    parallelism_config_class="accel_backends.parallelism_config:ParallelismConfig",
    checkpoint_layouts=("accel_backends.fsdp.checkpoint_files:find_layout",),
    config_questions=_CONFIG_QUESTIONS,
    renamed_config_keys={"fsdp_backward_prefetch_policy": "fsdp_backward_prefetch"},
    accelerate_flag="ACCELERATE_USE_FSDP",
)
