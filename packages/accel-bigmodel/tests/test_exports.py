import json
import subprocess
import sys

import pytest
import torch

import accel_bigmodel

REQUIRED = [
    "init_empty_weights",
    "init_on_device",
    "compute_module_sizes",
    "get_max_memory",
    "get_balanced_memory",
    "get_max_layer_size",
    "calculate_maximum_sizes",
    "check_device_map",
    "dtype_byte_size",
    "convert_file_size_to_int",
    "find_tied_parameters",
    "retie_parameters",
    "check_tied_parameters_on_same_device",
    "check_tied_parameters_in_config",
    "set_module_tensor_to_device",
    "named_module_tensors",
    "id_tensor_storage",
    "load_state_dict",
    "load_offloaded_weights",
    "has_offloaded_params",
    "align_module_device",
    "CustomDtype",
    "TensorInformation",
    "infer_auto_device_map",
    "ModelHook",
    "SequentialHook",
    "add_hook_to_module",
    "remove_hook_from_module",
    "remove_hook_from_submodules",
    "AlignDevicesHook",
    "attach_execution_device_hook",
    "attach_align_device_hook",
    "attach_align_device_hook_on_blocks",
    "CpuOffload",
    "UserCpuOffloadHook",
    "dispatch_model",
    "cpu_offload",
    "cpu_offload_with_hook",
    "disk_offload",
    "load_checkpoint_in_model",
    "load_checkpoint_and_dispatch",
    "OffloadedWeightsLoader",
    "PrefixedDataset",
    "offload_state_dict",
    "offload_weight",
    "load_offloaded_weight",
    "save_offload_index",
    "extract_submodules_state_dict",
    "OffloadStorage",
    "DiskOffloadStorage",
]


def test_every_name_is_exported():
    missing = [n for n in REQUIRED if not hasattr(accel_bigmodel, n)]
    assert missing == []
    assert set(REQUIRED) <= set(accel_bigmodel.__all__)
    assert all(hasattr(accel_bigmodel, n) for n in accel_bigmodel.__all__)


@pytest.mark.slow
def test_import_pulls_no_sibling_package_but_accel_ops_nor_heavy_extras():
    code = (
        "import json, sys, accel_bigmodel; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('accel_core', 'accel_launch', 'accel', 'transformers'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_tensor_information_is_accel_ops_class():
    import accel_ops

    assert accel_bigmodel.TensorInformation is accel_ops.TensorInformation
    info = accel_bigmodel.TensorInformation(shape=torch.Size([2, 3]), dtype=torch.float16)
    assert (info.shape, info.dtype) == (torch.Size([2, 3]), torch.float16)


def test_set_module_tensor_to_device_refuses_another_shape_with_accelerates_words():
    from accel_bigmodel import set_module_tensor_to_device

    module = torch.nn.Linear(3, 2)
    before = module.weight.detach().clone()
    with pytest.raises(
        ValueError,
        match=r'^Trying to set a tensor of shape torch.Size\(\[3, 3\]\) in "weight" \(which has '
        r"shape torch.Size\(\[2, 3\]\)\), this looks incorrect",
    ):
        set_module_tensor_to_device(module, "weight", "cpu", value=torch.zeros(3, 3))
    assert torch.equal(module.weight, before)
