"""The descriptions' Accelerate spellings are the table accel-ops held before (issue 34)."""

from accel_backends.deepspeed.description import DESCRIPTION as DEEPSPEED
from accel_backends.fsdp.description import DESCRIPTION as FSDP
from accel_backends.xla.description import DESCRIPTION as XLA
from accel_ops.accelerate_spellings import option_reader, strategy_flags

# accel-ops 0.2.4's STRATEGY_CONFIG_VARIABLES: key -> (variable, name of its reader there)
OLD_TABLE = {
    "deepspeed": {
        "deepspeed_config_file": ("ACCELERATE_DEEPSPEED_CONFIG_FILE", "_optional_text"),
        "zero_stage": ("ACCELERATE_DEEPSPEED_ZERO_STAGE", "_int"),
        "offload_optimizer_device": ("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "_lower"),
        "offload_param_device": ("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "_lower"),
        "offload_optimizer_nvme_path": (
            "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH",
            "_optional_text",
        ),
        "offload_param_nvme_path": (
            "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH",
            "_optional_text",
        ),
        "gradient_accumulation_steps": ("ACCEL_GRADIENT_ACCUMULATION_STEPS", "_int"),
        "gradient_clipping": ("ACCELERATE_GRADIENT_CLIPPING", "_float"),
        "zero3_init_flag": ("ACCELERATE_DEEPSPEED_ZERO3_INIT", "parse_bool"),
        "zero3_save_16bit_model": ("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "parse_bool"),
        "deepspeed_moe_layer_cls_names": (
            "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES",
            "_optional_text",
        ),
    },
    "fsdp": {
        "fsdp_version": ("FSDP_VERSION", "_int"),
        "fsdp_sharding_strategy": ("FSDP_SHARDING_STRATEGY", "read"),  # numbered choices
        "fsdp_reshard_after_forward": ("FSDP_RESHARD_AFTER_FORWARD", "_bool_or_name"),
        "fsdp_offload_params": ("FSDP_OFFLOAD_PARAMS", "parse_bool"),
        "fsdp_min_num_params": ("FSDP_MIN_NUM_PARAMS", "_int"),
        "fsdp_auto_wrap_policy": ("FSDP_AUTO_WRAP_POLICY", "_text"),
        "fsdp_transformer_layer_cls_to_wrap": ("FSDP_TRANSFORMER_CLS_TO_WRAP", "_optional_text"),
        "fsdp_backward_prefetch": ("FSDP_BACKWARD_PREFETCH", "_text"),
        "fsdp_state_dict_type": ("FSDP_STATE_DICT_TYPE", "_text"),
        "fsdp_forward_prefetch": ("FSDP_FORWARD_PREFETCH", "parse_bool"),
        "fsdp_use_orig_params": ("FSDP_USE_ORIG_PARAMS", "parse_bool"),
        "fsdp_cpu_ram_efficient_loading": ("FSDP_CPU_RAM_EFFICIENT_LOADING", "parse_bool"),
        "fsdp_sync_module_states": ("FSDP_SYNC_MODULE_STATES", "parse_bool"),
        "fsdp_activation_checkpointing": ("FSDP_ACTIVATION_CHECKPOINTING", "parse_bool"),
    },
    "xla": {"downcast_bf16": ("ACCELERATE_DOWNCAST_BF16", "parse_bool")},
}


def test_every_description_spells_the_old_table():
    for description in (DEEPSPEED, FSDP, XLA):
        spelled = {
            option.name: (option.accelerate_env, option_reader(option).__name__)
            for option in description.launch_options
            if option.accelerate_env is not None
        }
        assert spelled == OLD_TABLE[description.name]
        assert list(spelled) == list(OLD_TABLE[description.name])  # same order: same sources


def test_numbered_sharding_strategy_reads_from_one():
    option = next(o for o in FSDP.launch_options if o.name == "fsdp_sharding_strategy")
    assert option_reader(option)("1") == "FULL_SHARD"
    assert option_reader(option)("HYBRID_SHARD") == "HYBRID_SHARD"


def test_the_flags_of_the_old_table():
    flags = dict(strategy_flags())
    assert flags["ACCELERATE_USE_DEEPSPEED"] == "deepspeed"
    assert flags["ACCELERATE_USE_FSDP"] == "fsdp"
    assert flags["ACCELERATE_USE_MEGATRON_LM"] == "megatron_lm"


def test_the_choice_lists_are_accelerates_constants_read_without_torch():
    # One definition of each list: accel_ops.constants (Accelerate's public lists, importable
    # without torch), which the engines' descriptions read. Importing the descriptions, as
    # ``accel launch`` does, still imports no torch.
    import subprocess
    import sys

    from accel_backends.deepspeed import description as deepspeed
    from accel_backends.fsdp import description as fsdp
    from accel_ops import constants

    options = {option.name: option for option in fsdp.DESCRIPTION.launch_options}
    assert options["fsdp_sharding_strategy"].choices == tuple(constants.FSDP_SHARDING_STRATEGY)
    assert options["fsdp_auto_wrap_policy"].choices == tuple(constants.FSDP_AUTO_WRAP_POLICY)
    assert options["fsdp_backward_prefetch"].choices == tuple(constants.FSDP_BACKWARD_PREFETCH)
    assert options["fsdp_state_dict_type"].choices == tuple(constants.FSDP_STATE_DICT_TYPE)
    launcher = deepspeed.DESCRIPTION.config_keys["deepspeed_multinode_launcher"]
    assert launcher.choices == tuple(constants.DEEPSPEED_MULTINODE_LAUNCHERS)
    code = (
        "import sys, accel_backends.fsdp.description, accel_backends.deepspeed.description; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
