"""Every public name is importable from the top level, and importing stays light."""

import subprocess
import sys

import accel_ops

ISSUE_NAMES = [
    "PartialState",
    "is_initialized",
    "LaunchEnvironment",
    "DistributedType",
    "ComputeEnvironment",
    "PrecisionType",
    "DynamoBackend",
    "RNGType",
    "gather",
    "gather_object",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "pad_across_processes",
    "pad_input_tensors",
    "concatenate",
    "recursively_apply",
    "send_to_device",
    "find_batch_size",
    "ignorant_find_batch_size",
    "slice_tensors",
    "convert_to_fp32",
    "convert_outputs_to_fp32",
    "find_device",
    "get_data_structure",
    "initialize_tensors",
    "honor_type",
    "is_namedtuple",
    "is_torch_tensor",
    "listify",
    "copy_tensor_to_devices",
    "CannotPadNestedTensorWarning",
    "wait_for_everyone",
    "drop_duplicated_tail",
    "DistributedOperationException",
    "patch_environment",
    "clear_environment",
    "parse_flag_from_env",
    "parse_choice_from_env",
    "get_int_from_env",
    "str_to_bool",
    "convert_dict_to_env_variables",
    "convert_bytes",
    "get_pretty_name",
    "merge_dicts",
    "compare_versions",
    "is_torch_version",
    "is_cuda_available",
    "is_mps_available",
    "is_bf16_available",
    "is_fp16_available",
    "is_deepspeed_available",
    "is_torch_xla_available",
    "is_rich_available",
    "is_tensorboard_available",
    "is_wandb_available",
    "is_mlflow_available",
    "is_aim_available",
    "is_comet_ml_available",
    "is_transformers_available",
    "is_datasets_available",
    "is_timm_available",
    "is_torchdata_stateful_dataloader_available",
    "is_npu_available",
    "is_xpu_available",
    "is_hpu_available",
    "is_mlu_available",
    "is_musa_available",
    "is_sdaa_available",
    "is_neuron_available",
    "SAFE_WEIGHTS_NAME",
    "SAFE_WEIGHTS_INDEX_NAME",
    "WEIGHTS_NAME",
    "WEIGHTS_INDEX_NAME",
    "MODEL_NAME",
    "OPTIMIZER_NAME",
    "SCHEDULER_NAME",
    "SAMPLER_NAME",
    "SCALER_NAME",
    "RNG_STATE_NAME",
]


def test_every_name_is_exported():
    missing = [name for name in ISSUE_NAMES if name not in accel_ops.__all__]
    assert missing == []
    assert all(hasattr(accel_ops, name) for name in accel_ops.__all__)
    assert len(set(accel_ops.__all__)) == len(accel_ops.__all__)


def test_import_adds_nothing_beyond_torch_and_accel_ops():
    code = (
        "import sys, torch; before = set(sys.modules); import accel_ops; "
        "print(sorted(m for m in set(sys.modules) - before if not m.startswith('accel_ops')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
