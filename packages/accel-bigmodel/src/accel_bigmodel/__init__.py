"""Inference for models larger than memory: empty-weight init, device maps, hooks, CPU and disk
offload, checkpoint dispatch.

Every public name is importable from here; the meta-package ``accel`` re-exports them under
Hugging Face Accelerate's module names (``accel.hooks``, ``accel.utils``, ``accel.big_modeling``).
``TensorInformation`` is accel-ops' own class, re-exported here for compatibility.

Public names are imported from their modules on first use (as in accel-ops): a process that uses
one hook does not load the device-map solver, quantization or offload.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs read; at run time, ``__getattr__`` below
    from accel_bigmodel.align_hooks import (
        AlignDevicesHook,
        attach_align_device_hook,
        attach_align_device_hook_on_blocks,
        attach_execution_device_hook,
    )
    from accel_bigmodel.auto_map import infer_auto_device_map
    from accel_bigmodel.checkpoint_files import load_state_dict
    from accel_bigmodel.device_map import check_device_map
    from accel_bigmodel.dispatch import dispatch_model
    from accel_bigmodel.dtypes import (
        CustomDtype,
        convert_file_size_to_int,
        dtype_byte_size,
    )
    from accel_bigmodel.hooks import (
        ModelHook,
        SequentialHook,
        add_hook_to_module,
        remove_hook_from_module,
        remove_hook_from_submodules,
    )
    from accel_bigmodel.init_empty import init_empty_weights, init_on_device
    from accel_bigmodel.layerwise_casting import (
        LayerwiseCastingHook,
        attach_layerwise_casting_hooks,
    )
    from accel_bigmodel.loading import (
        load_checkpoint_and_dispatch,
        load_checkpoint_in_model,
        load_offloaded_weights,
    )
    from accel_bigmodel.memory import (
        check_device_same,
        get_balanced_memory,
        get_max_memory,
        get_module_leaves,
    )
    from accel_bigmodel.offload import (
        OffloadedWeightsLoader,
        PrefixedDataset,
        extract_submodules_state_dict,
        load_offloaded_weight,
        offload_state_dict,
        offload_weight,
        save_offload_index,
    )
    from accel_bigmodel.offloaded_state import (
        get_state_dict_from_offload,
        get_state_dict_offloaded_model,
    )
    from accel_bigmodel.peft_models import is_peft_model
    from accel_bigmodel.pipeline_inference import (
        build_pipeline,
        find_pippy_batch_size,
        generate_device_map,
        pippy_forward,
        prepare_pippy,
    )
    from accel_bigmodel.placement_units import (
        clean_device_map,
        fallback_allocate,
        get_module_size_with_ties,
    )
    from accel_bigmodel.prefetch import Prefetcher
    from accel_bigmodel.quantization import (
        BnbQuantizationConfig,
        get_keys_to_not_convert,
        get_parameter_device,
        get_quantized_model_device_map,
        has_4bit_bnb_layers,
        load_and_quantize_model,
        quantize_and_offload_8bit,
        replace_with_bnb_layers,
    )
    from accel_bigmodel.safetensors_io import CheckpointError
    from accel_bigmodel.sizes import (
        calculate_maximum_sizes,
        compute_module_sizes,
        compute_module_total_buffer_size,
        get_max_layer_size,
        get_non_persistent_buffers,
        id_tensor_storage,
        named_module_tensors,
    )
    from accel_bigmodel.storage import DiskOffloadStorage, OffloadStorage
    from accel_bigmodel.tensors import (
        align_module_device,
        has_offloaded_params,
        set_module_tensor_to_device,
    )
    from accel_bigmodel.tied import (
        check_tied_parameters_in_config,
        check_tied_parameters_on_same_device,
        find_tied_parameters,
        retie_parameters,
    )
    from accel_bigmodel.whole_model_offload import (
        CpuOffload,
        UserCpuOffloadHook,
        cpu_offload,
        cpu_offload_with_hook,
        disk_offload,
    )
    from accel_ops import TensorInformation
    from accel_ops.out_of_scope import OutOfScopeError

__version__ = "0.2.6"

__all__ = [
    "AlignDevicesHook",
    "BnbQuantizationConfig",
    "CheckpointError",
    "CpuOffload",
    "CustomDtype",
    "DiskOffloadStorage",
    "LayerwiseCastingHook",
    "ModelHook",
    "OffloadStorage",
    "OffloadedWeightsLoader",
    "OutOfScopeError",
    "Prefetcher",
    "PrefixedDataset",
    "SequentialHook",
    "TensorInformation",
    "UserCpuOffloadHook",
    "add_hook_to_module",
    "align_module_device",
    "attach_align_device_hook",
    "attach_align_device_hook_on_blocks",
    "attach_execution_device_hook",
    "attach_layerwise_casting_hooks",
    "build_pipeline",
    "calculate_maximum_sizes",
    "check_device_map",
    "check_device_same",
    "check_tied_parameters_in_config",
    "check_tied_parameters_on_same_device",
    "clean_device_map",
    "compute_module_sizes",
    "compute_module_total_buffer_size",
    "convert_file_size_to_int",
    "cpu_offload",
    "cpu_offload_with_hook",
    "disk_offload",
    "dispatch_model",
    "dtype_byte_size",
    "extract_submodules_state_dict",
    "fallback_allocate",
    "find_pippy_batch_size",
    "find_tied_parameters",
    "generate_device_map",
    "get_balanced_memory",
    "get_keys_to_not_convert",
    "get_max_layer_size",
    "get_max_memory",
    "get_module_leaves",
    "get_module_size_with_ties",
    "get_non_persistent_buffers",
    "get_parameter_device",
    "get_quantized_model_device_map",
    "get_state_dict_from_offload",
    "get_state_dict_offloaded_model",
    "has_4bit_bnb_layers",
    "has_offloaded_params",
    "id_tensor_storage",
    "infer_auto_device_map",
    "init_empty_weights",
    "init_on_device",
    "is_peft_model",
    "load_and_quantize_model",
    "load_checkpoint_and_dispatch",
    "load_checkpoint_in_model",
    "load_offloaded_weight",
    "load_offloaded_weights",
    "load_state_dict",
    "named_module_tensors",
    "offload_state_dict",
    "offload_weight",
    "pippy_forward",
    "prepare_pippy",
    "quantize_and_offload_8bit",
    "remove_hook_from_module",
    "remove_hook_from_submodules",
    "replace_with_bnb_layers",
    "retie_parameters",
    "save_offload_index",
    "set_module_tensor_to_device",
]

# module -> the public names it defines; each is imported on first use
_MODULES: dict[str, tuple[str, ...]] = {
    "accel_bigmodel.align_hooks": (
        "AlignDevicesHook",
        "attach_align_device_hook",
        "attach_align_device_hook_on_blocks",
        "attach_execution_device_hook",
    ),
    "accel_bigmodel.auto_map": ("infer_auto_device_map",),
    "accel_bigmodel.checkpoint_files": ("load_state_dict",),
    "accel_bigmodel.device_map": ("check_device_map",),
    "accel_bigmodel.dispatch": ("dispatch_model",),
    "accel_bigmodel.dtypes": (
        "CustomDtype",
        "convert_file_size_to_int",
        "dtype_byte_size",
    ),
    "accel_bigmodel.hooks": (
        "ModelHook",
        "SequentialHook",
        "add_hook_to_module",
        "remove_hook_from_module",
        "remove_hook_from_submodules",
    ),
    "accel_bigmodel.init_empty": (
        "init_empty_weights",
        "init_on_device",
    ),
    "accel_bigmodel.layerwise_casting": (
        "LayerwiseCastingHook",
        "attach_layerwise_casting_hooks",
    ),
    "accel_bigmodel.loading": (
        "load_checkpoint_and_dispatch",
        "load_checkpoint_in_model",
        "load_offloaded_weights",
    ),
    "accel_bigmodel.memory": (
        "check_device_same",
        "get_balanced_memory",
        "get_max_memory",
        "get_module_leaves",
    ),
    "accel_bigmodel.offload": (
        "OffloadedWeightsLoader",
        "PrefixedDataset",
        "extract_submodules_state_dict",
        "load_offloaded_weight",
        "offload_state_dict",
        "offload_weight",
        "save_offload_index",
    ),
    "accel_bigmodel.offloaded_state": (
        "get_state_dict_from_offload",
        "get_state_dict_offloaded_model",
    ),
    "accel_bigmodel.peft_models": ("is_peft_model",),
    "accel_bigmodel.pipeline_inference": (
        "build_pipeline",
        "find_pippy_batch_size",
        "generate_device_map",
        "pippy_forward",
        "prepare_pippy",
    ),
    "accel_bigmodel.placement_units": (
        "clean_device_map",
        "fallback_allocate",
        "get_module_size_with_ties",
    ),
    "accel_bigmodel.prefetch": ("Prefetcher",),
    "accel_bigmodel.quantization": (
        "BnbQuantizationConfig",
        "get_keys_to_not_convert",
        "get_parameter_device",
        "get_quantized_model_device_map",
        "has_4bit_bnb_layers",
        "load_and_quantize_model",
        "quantize_and_offload_8bit",
        "replace_with_bnb_layers",
    ),
    "accel_bigmodel.safetensors_io": ("CheckpointError",),
    "accel_bigmodel.sizes": (
        "calculate_maximum_sizes",
        "compute_module_sizes",
        "compute_module_total_buffer_size",
        "get_max_layer_size",
        "get_non_persistent_buffers",
        "id_tensor_storage",
        "named_module_tensors",
    ),
    "accel_bigmodel.storage": (
        "DiskOffloadStorage",
        "OffloadStorage",
    ),
    "accel_bigmodel.tensors": (
        "align_module_device",
        "has_offloaded_params",
        "set_module_tensor_to_device",
    ),
    "accel_bigmodel.tied": (
        "check_tied_parameters_in_config",
        "check_tied_parameters_on_same_device",
        "find_tied_parameters",
        "retie_parameters",
    ),
    "accel_bigmodel.whole_model_offload": (
        "CpuOffload",
        "UserCpuOffloadHook",
        "cpu_offload",
        "cpu_offload_with_hook",
        "disk_offload",
    ),
    "accel_ops": ("TensorInformation",),
    "accel_ops.out_of_scope": ("OutOfScopeError",),
}

_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    """Import the public name ``name`` from the module that defines it, and keep it here.

    Other names are looked up as submodules (``accel_bigmodel.hooks``), which an eager package
    made attributes as a side effect of importing them.
    """
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"accel_bigmodel.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"accel_bigmodel.{name}":
                raise  # the submodule exists; something it imports does not
    raise AttributeError(f"module 'accel_bigmodel' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names, resolved or not, and what the package already holds."""
    return sorted(set(globals()) | set(__all__))
