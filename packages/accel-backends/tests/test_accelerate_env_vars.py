"""A job set up for Hugging Face Accelerate (``ACCELERATE_*``, ``FSDP_*``) parses the same as ours.

The environments below are what ``accelerate launch`` 1.15 writes (captured from
``accelerate.utils.launch.prepare_deepspeed_cmd_env`` / ``prepare_multi_gpu_env``).
"""

import json
import os
import subprocess
import sys

import pytest

from accel_ops import LaunchEnvironment, LaunchEnvironmentError, read_accel_variable
from accel_ops.accelerate_spellings import ALIASES, resolve

# accelerate launch --use_deepspeed --zero_stage 3 --offload_optimizer_device cpu
#   --offload_param_device none --gradient_accumulation_steps 4 --gradient_clipping 1.0
#   --zero3_init_flag true --zero3_save_16bit_model true --mixed_precision bf16
ACCELERATE_DEEPSPEED_ENV = {
    "ACCELERATE_MIXED_PRECISION": "bf16",
    "ACCELERATE_CONFIG_DS_FIELDS": "[]",
    "ACCELERATE_USE_DEEPSPEED": "true",
    "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4",
    "ACCELERATE_GRADIENT_CLIPPING": "1.0",
    "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "cpu",
    "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "none",
    "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true",
    "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true",
}

# accelerate launch --use_fsdp --fsdp_sharding_strategy SHARD_GRAD_OP --fsdp_offload_params true
#   --fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP --fsdp_transformer_layer_cls_to_wrap BertLayer
#   --fsdp_state_dict_type SHARDED_STATE_DICT --fsdp_cpu_ram_efficient_loading true
#   --fsdp_sync_module_states true --mixed_precision fp16 --dynamo_backend inductor
#   --dynamo_mode max-autotune --dynamo_use_fullgraph
ACCELERATE_FSDP_ENV = {
    "ACCELERATE_MIXED_PRECISION": "fp16",
    "ACCELERATE_DYNAMO_BACKEND": "INDUCTOR",
    "ACCELERATE_DYNAMO_MODE": "max-autotune",
    "ACCELERATE_DYNAMO_USE_FULLGRAPH": "True",
    "ACCELERATE_DYNAMO_USE_DYNAMIC": "False",
    "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False",
    "ACCELERATE_USE_FSDP": "true",
    "FSDP_VERSION": "1",
    "FSDP_SHARDING_STRATEGY": "SHARD_GRAD_OP",
    "FSDP_RESHARD_AFTER_FORWARD": "true",
    "FSDP_OFFLOAD_PARAMS": "true",
    "FSDP_MIN_NUM_PARAMS": "100000000",
    "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
    "FSDP_TRANSFORMER_CLS_TO_WRAP": "BertLayer",
    "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT",
    "FSDP_FORWARD_PREFETCH": "false",
    "FSDP_USE_ORIG_PARAMS": "true",
    "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
    "FSDP_SYNC_MODULE_STATES": "true",
    "FSDP_ACTIVATION_CHECKPOINTING": "false",
    "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD": "false",
}

# The same two jobs spelled our way: what accel launch writes for the same options.
OURS_DEEPSPEED_ENV = {
    "ACCEL_MIXED_PRECISION": "bf16",
    "ACCEL_GRADIENT_ACCUMULATION_STEPS": "4",
    "ACCEL_STRATEGY": "deepspeed",
    "ACCEL_STRATEGY_CONFIG": json.dumps(
        {
            "zero_stage": 3,
            "gradient_accumulation_steps": 4,
            "gradient_clipping": 1.0,
            "offload_optimizer_device": "cpu",
            "offload_param_device": "none",
            "zero3_init_flag": True,
            "zero3_save_16bit_model": True,
        }
    ),
}
OURS_FSDP_ENV = {
    "ACCEL_MIXED_PRECISION": "fp16",
    "ACCEL_DYNAMO_BACKEND": "inductor",
    "ACCEL_DYNAMO_MODE": "max-autotune",
    "ACCEL_DYNAMO_USE_FULLGRAPH": "true",
    "ACCEL_DYNAMO_USE_DYNAMIC": "false",
    "ACCEL_STRATEGY": "fsdp",
    "ACCEL_STRATEGY_CONFIG": json.dumps(
        {
            "fsdp_version": 1,
            "fsdp_sharding_strategy": "SHARD_GRAD_OP",
            "fsdp_reshard_after_forward": True,
            "fsdp_offload_params": True,
            "fsdp_min_num_params": 100000000,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_forward_prefetch": False,
            "fsdp_use_orig_params": True,
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_sync_module_states": True,
            "fsdp_activation_checkpointing": False,
        }
    ),
}

TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_PORT": "29411"}

_PRINT_FIELDS = (
    "import dataclasses, json; from accel_ops import LaunchEnvironment; "
    "e = LaunchEnvironment.from_environ(); "
    "d = {f.name: getattr(e, f.name) for f in dataclasses.fields(e)}; "
    "d['strategy_config'] = dict(e.strategy_config); print(json.dumps(d, sort_keys=True))"
)


def _fields_in_subprocess(variables):
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ACCEL_", "ACCELERATE_", "FSDP_"))
    }
    env.update(variables)
    done = subprocess.run(
        [sys.executable, "-c", _PRINT_FIELDS],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [(ACCELERATE_DEEPSPEED_ENV, OURS_DEEPSPEED_ENV), (ACCELERATE_FSDP_ENV, OURS_FSDP_ENV)],
    ids=["deepspeed", "fsdp"],
)
def test_a_process_started_by_accelerate_launch_reads_the_same_fields(theirs, ours):
    from_accelerate = _fields_in_subprocess({**TORCHRUN, **theirs})
    from_accel = _fields_in_subprocess({**TORCHRUN, **ours})
    assert from_accelerate == from_accel
    assert from_accelerate["rank"] == 1 and from_accelerate["world_size"] == 2


def test_deepspeed_job_fields_by_value():
    env = LaunchEnvironment.from_environ(ACCELERATE_DEEPSPEED_ENV)
    assert env.mixed_precision == "bf16"
    assert env.gradient_accumulation_steps == 4
    assert env.strategy == "deepspeed"
    assert dict(env.strategy_config) == {
        "zero_stage": 3,
        "gradient_accumulation_steps": 4,
        "gradient_clipping": 1.0,
        "offload_optimizer_device": "cpu",
        "offload_param_device": "none",
        "zero3_init_flag": True,
        "zero3_save_16bit_model": True,
    }


def test_fsdp_job_fields_by_value():
    env = LaunchEnvironment.from_environ(ACCELERATE_FSDP_ENV)
    assert (env.mixed_precision, env.strategy) == ("fp16", "fsdp")
    assert (env.dynamo_backend, env.dynamo_mode) == ("inductor", "max-autotune")
    assert (env.dynamo_use_fullgraph, env.dynamo_use_dynamic) == (True, False)
    config = dict(env.strategy_config)
    assert config["fsdp_sharding_strategy"] == "SHARD_GRAD_OP"
    assert config["fsdp_transformer_layer_cls_to_wrap"] == "BertLayer"
    assert config["fsdp_min_num_params"] == 100_000_000
    assert config["fsdp_offload_params"] is True and config["fsdp_forward_prefetch"] is False
    # Accelerate's activation-checkpointing offload has no key of ours: not carried over
    assert "fsdp_activation_checkpointing_offload" not in config


# One value per aliased variable, and a different valid value for the same field.
ALIAS_VALUES = {
    "ACCEL_USE_CPU": ("True", "false", "use_cpu", True, False),
    "ACCEL_MIXED_PRECISION": ("fp16", "bf16", "mixed_precision", "fp16", "bf16"),
    "ACCEL_DEBUG_MODE": ("true", "0", "debug", True, False),
    "ACCEL_DYNAMO_BACKEND": ("INDUCTOR", "eager", "dynamo_backend", "inductor", "eager"),
    "ACCEL_DYNAMO_MODE": (
        "reduce-overhead",
        "default",
        "dynamo_mode",
        "reduce-overhead",
        "default",
    ),
    "ACCEL_DYNAMO_USE_FULLGRAPH": ("True", "false", "dynamo_use_fullgraph", True, False),
    "ACCEL_DYNAMO_USE_DYNAMIC": ("True", "false", "dynamo_use_dynamic", True, False),
    "ACCEL_GRADIENT_ACCUMULATION_STEPS": ("8", "2", "gradient_accumulation_steps", 8, 2),
    "ACCEL_TORCH_DEVICE": ("cuda:1", "cpu", "torch_device", "cuda:1", "cpu"),
}


@pytest.mark.parametrize("ours", sorted(ALIAS_VALUES))
def test_each_alias_alone_and_ours_wins_when_both_are_set(ours):
    theirs = ALIASES[ours]
    their_text, our_text, field, their_value, our_value = ALIAS_VALUES[ours]
    assert getattr(LaunchEnvironment.from_environ({theirs: their_text}), field) == their_value
    both = LaunchEnvironment.from_environ({theirs: their_text, ours: our_text})
    assert getattr(both, field) == our_value


def test_every_launch_alias_is_covered_by_the_test_above():
    launch_aliases = set(ALIASES) - {"ACCEL_LOG_LEVEL", "ACCEL_ENABLE_RICH"}
    assert launch_aliases == set(ALIAS_VALUES)


def test_our_strategy_and_config_win_over_accelerates():
    env = LaunchEnvironment.from_environ(
        {
            **ACCELERATE_DEEPSPEED_ENV,
            "ACCEL_STRATEGY": "ddp",
            "ACCEL_STRATEGY_CONFIG": '{"find_unused_parameters": true}',
        }
    )
    assert env.strategy == "ddp"
    assert dict(env.strategy_config) == {"find_unused_parameters": True}


def test_our_strategy_with_accelerates_config_variables_of_that_strategy():
    # ACCEL_STRATEGY=fsdp set, no ACCEL_STRATEGY_CONFIG: the FSDP_* variables fill it
    env = LaunchEnvironment.from_environ(
        {"ACCEL_STRATEGY": "fsdp", "ACCELERATE_USE_DEEPSPEED": "true", "FSDP_VERSION": "2"}
    )
    assert env.strategy == "fsdp"
    assert dict(env.strategy_config) == {"fsdp_version": 2}


def test_gradient_accumulation_in_the_deepspeed_config_follows_the_winning_variable():
    env = LaunchEnvironment.from_environ(
        {**ACCELERATE_DEEPSPEED_ENV, "ACCEL_GRADIENT_ACCUMULATION_STEPS": "16"}
    )
    assert env.gradient_accumulation_steps == 16
    assert env.strategy_config["gradient_accumulation_steps"] == 16


def test_numbered_fsdp_sharding_strategy_and_fsdp2_reshard_flag():
    env = LaunchEnvironment.from_environ(
        {
            "ACCELERATE_USE_FSDP": "true",
            "FSDP_SHARDING_STRATEGY": "5",
            "FSDP_RESHARD_AFTER_FORWARD": "False",
        }
    )
    assert env.strategy_config["fsdp_sharding_strategy"] == "HYBRID_SHARD_ZERO2"
    assert env.strategy_config["fsdp_reshard_after_forward"] is False
    env = LaunchEnvironment.from_environ(
        {"ACCELERATE_USE_FSDP": "true", "FSDP_RESHARD_AFTER_FORWARD": "NO_SHARD"}
    )
    assert env.strategy_config["fsdp_reshard_after_forward"] == "NO_SHARD"


def test_accelerate_none_and_auto_mean_unset():
    env = LaunchEnvironment.from_environ(
        {
            "ACCELERATE_USE_DEEPSPEED": "true",
            "ACCELERATE_DEEPSPEED_CONFIG_FILE": "none",
            "ACCELERATE_GRADIENT_CLIPPING": "auto",
            "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH": "none",
        }
    )
    assert env.strategy == "deepspeed" and dict(env.strategy_config) == {}


def test_xla_downcast_and_megatron_flag():
    env = LaunchEnvironment.from_environ(
        {"ACCEL_STRATEGY": "xla", "ACCELERATE_DOWNCAST_BF16": "true"}
    )
    assert dict(env.strategy_config) == {"downcast_bf16": True}
    # accel has no Megatron-LM strategy: the name goes through and accel-core refuses it
    assert LaunchEnvironment.from_environ({"ACCELERATE_USE_MEGATRON_LM": "true"}).strategy == (
        "megatron_lm"
    )
    flags_off = {"ACCELERATE_USE_DEEPSPEED": "false", "ACCELERATE_USE_FSDP": "False"}
    assert LaunchEnvironment.from_environ(flags_off).strategy is None


def test_two_strategy_flags_are_an_error_naming_both():
    with pytest.raises(LaunchEnvironmentError) as caught:
        LaunchEnvironment.from_environ(
            {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_USE_FSDP": "true"}
        )
    assert "ACCELERATE_USE_DEEPSPEED='true' and ACCELERATE_USE_FSDP='true'" in str(caught.value)
    assert "ACCEL_STRATEGY" in str(caught.value)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        (
            {"ACCELERATE_MIXED_PRECISION": "fp8"},
            "ACCELERATE_MIXED_PRECISION='fp8' is not valid; expected one of no, fp16, bf16",
        ),
        (
            {"ACCELERATE_USE_DEEPSPEED": "1", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "three"},
            "ACCELERATE_DEEPSPEED_ZERO_STAGE='three' is not valid; expected an integer",
        ),
        (
            {"ACCELERATE_USE_DEEPSPEED": "1", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "x"},
            "ACCELERATE_GRADIENT_ACCUMULATION_STEPS='x' is not valid; expected an integer",
        ),
        (
            {"ACCELERATE_USE_FSDP": "maybe"},
            "ACCELERATE_USE_FSDP='maybe' is not valid; expected a boolean",
        ),
    ],
)
def test_bad_values_name_the_accelerate_variable(variables, message):
    with pytest.raises(LaunchEnvironmentError, match="^" + message.replace("(", r"\(")):
        LaunchEnvironment.from_environ(variables)


def test_resolve_reports_where_each_value_came_from():
    spelled = resolve({"ACCELERATE_MIXED_PRECISION": "bf16", "ACCEL_DEBUG_MODE": "1"})
    assert spelled.values["ACCEL_MIXED_PRECISION"] == "bf16"
    assert dict(spelled.sources) == {"ACCEL_MIXED_PRECISION": "ACCELERATE_MIXED_PRECISION"}


def test_read_accel_variable_prefers_ours():
    assert read_accel_variable("ACCEL_LOG_LEVEL", {"ACCELERATE_LOG_LEVEL": "INFO"}) == "INFO"
    both = {"ACCELERATE_LOG_LEVEL": "INFO", "ACCEL_LOG_LEVEL": "DEBUG"}
    assert read_accel_variable("ACCEL_LOG_LEVEL", both) == "DEBUG"
    assert read_accel_variable("ACCEL_LOG_LEVEL", {}) is None
    assert read_accel_variable("ACCEL_HANG_REPORT_DIR", {"ACCELERATE_HANG_REPORT_DIR": "x"}) is None
