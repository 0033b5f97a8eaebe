"""How the ``deepspeed`` engine describes itself (torch-free: ``accel launch`` reads it).

See :class:`accel_base.engine_description.EngineDescription`. The launch options' ``engine_key``
values are the one map from launch keys (and ``DeepSpeedPlugin`` fields) to DeepSpeed's dotted
keys; :mod:`accel_backends.deepspeed.resolution` reads it from here. ``accel config`` asks for
a DeepSpeed JSON file or, without one, the ZeRO settings.
"""

from __future__ import annotations

from accel_base.config_question import ConfigQuestion
from accel_base.engine_description import ConfigKey, EngineDescription, LaunchOption
from accel_base.mesh_dimension import DP_REPLICATE
from accel_ops.constants import DEEPSPEED_MULTINODE_LAUNCHERS  # torch-free module

#: Where DeepSpeed may offload optimizer states or parameters.
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
#: DeepSpeed's multi-machine launchers (``deepspeed_multinode_launcher``).

_LAUNCH_OPTIONS: tuple[LaunchOption, ...] = (
    LaunchOption(
        "deepspeed_config_file",
        "DeepSpeed JSON config file.",
        accelerate_env="ACCELERATE_DEEPSPEED_CONFIG_FILE",
        accelerate_reading="optional",
    ),
    LaunchOption(
        "zero_stage",
        "ZeRO stage.",
        kind="int",
        choices=(0, 1, 2, 3),
        engine_key="zero_optimization.stage",
        accelerate_env="ACCELERATE_DEEPSPEED_ZERO_STAGE",
    ),
    LaunchOption(
        "offload_optimizer_device",
        "Where optimizer states live.",
        choices=OFFLOAD_DEVICES,
        engine_key="zero_optimization.offload_optimizer.device",
        accelerate_env="ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
        accelerate_reading="lower",
    ),
    LaunchOption(
        "offload_param_device",
        "Where parameters live (stage 3).",
        choices=OFFLOAD_DEVICES,
        engine_key="zero_optimization.offload_param.device",
        accelerate_env="ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE",
        accelerate_reading="lower",
    ),
    LaunchOption(
        "offload_optimizer_nvme_path",
        "NVMe folder for optimizer offload.",
        engine_key="zero_optimization.offload_optimizer.nvme_path",
        accelerate_env="ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH",
        accelerate_reading="optional",
    ),
    LaunchOption(
        "offload_param_nvme_path",
        "NVMe folder for parameter offload.",
        engine_key="zero_optimization.offload_param.nvme_path",
        accelerate_env="ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH",
        accelerate_reading="optional",
    ),
    LaunchOption(
        "gradient_accumulation_steps",
        "Steps per optimizer step (also ACCEL_GRADIENT_ACCUMULATION_STEPS).",
        kind="int",
        env="ACCEL_GRADIENT_ACCUMULATION_STEPS",
        engine_key="gradient_accumulation_steps",
        accelerate_env="ACCEL_GRADIENT_ACCUMULATION_STEPS",
    ),
    LaunchOption(
        "gradient_clipping",
        "Gradient norm clipping.",
        kind="float",
        engine_key="gradient_clipping",
        accelerate_env="ACCELERATE_GRADIENT_CLIPPING",
    ),
    LaunchOption(
        "zero3_init_flag",
        "Build large models sharded (true/false).",
        kind="bool",
        accelerate_env="ACCELERATE_DEEPSPEED_ZERO3_INIT",
    ),
    LaunchOption(
        "zero3_save_16bit_model",
        "Save 16-bit weights under stage 3 (true/false).",
        kind="bool",
        engine_key="zero_optimization.stage3_gather_16bit_weights_on_model_save",
        accelerate_env="ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
    ),
    LaunchOption(
        "deepspeed_moe_layer_cls_names",
        "Comma-separated MoE layer class names.",
        accelerate_env="ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES",
        accelerate_reading="optional",
    ),
)

_CONFIG_KEYS: dict[str, ConfigKey] = {
    "deepspeed_hostfile": ConfigKey("str", "DeepSpeed hostfile (DeepSpeed's own launchers only)"),
    "deepspeed_exclusion_filter": ConfigKey("str", "DeepSpeed exclusion filter"),
    "deepspeed_inclusion_filter": ConfigKey("str", "DeepSpeed inclusion filter"),
    "deepspeed_multinode_launcher": ConfigKey(
        "str", "multi-machine launcher", choices=tuple(DEEPSPEED_MULTINODE_LAUNCHERS)
    ),
}

#: Asked when the user has no DeepSpeed JSON file.
_NO_FILE = {"has_deepspeed_config_file": (False,)}

_CONFIG_QUESTIONS: tuple[ConfigQuestion, ...] = (
    ConfigQuestion(
        "has_deepspeed_config_file",
        "Do you have a DeepSpeed JSON config file?",
        kind="confirm",
        default=False,
        stored=False,
    ),
    ConfigQuestion(
        "deepspeed_config_file",
        "Path of the DeepSpeed config file:",
        kind="text",
        default="",
        when={"has_deepspeed_config_file": (True,)},
        required=True,
    ),
    ConfigQuestion("zero_stage", "Which ZeRO stage?", default=2, when=_NO_FILE),
    ConfigQuestion(
        "offload_optimizer_device", "Offload optimizer states to?", default="none", when=_NO_FILE
    ),
    ConfigQuestion(
        "offload_param_device", "Offload parameters to?", default="none", when={"zero_stage": (3,)}
    ),
    ConfigQuestion(
        "zero3_init_flag",
        "Build large models sharded (zero.Init)?",
        kind="confirm",
        default=True,
        when={"zero_stage": (3,)},
    ),
    ConfigQuestion(
        "zero3_save_16bit_model",
        "Save 16-bit weights at the end?",
        kind="confirm",
        default=True,
        when={"zero_stage": (3,)},
    ),
    ConfigQuestion(
        "gradient_accumulation_steps",
        "Gradient accumulation steps?",
        kind="integer",
        default=1,
        minimum=1,
        when=_NO_FILE,
    ),
)

DESCRIPTION = EngineDescription(
    name="deepspeed",
    title="DeepSpeed",
    strategy="accel_backends.deepspeed.strategy:DeepSpeedStrategy",
    install="accel-backends[deepspeed]",
    distributed_type="DEEPSPEED",
    launch_flag="use_deepspeed",
    launch_options=_LAUNCH_OPTIONS,
    config_section="deepspeed_config",
    config_keys=_CONFIG_KEYS,
    launch_check="accel_backends.deepspeed.launch_check:check",
    plugin_keywords=("deepspeed_plugin", "deepspeed_plugins"),
    plugin_class="accel_backends.deepspeed.plugin:DeepSpeedPlugin",
    dimensions=(DP_REPLICATE,),
    wrapper_classes=("DeepSpeedEngine", "PipelineEngine"),
    checkpoint_layouts=("accel_backends.deepspeed.zero_files:find_layout",),
    config_questions=_CONFIG_QUESTIONS,
    accelerate_flag="ACCELERATE_USE_DEEPSPEED",
)
