"""``accelerate.utils.fsdp_utils``: FSDP helpers."""

from accel._lazy import export_table

_NAMES = {
    "disable_fsdp_ram_efficient_loading": "accel_backends",
    "enable_fsdp_ram_efficient_loading": "accel_backends",
    "ensure_weights_retied": "accel_backends",
    "fsdp2_apply_ac": "accel_backends",
    "fsdp2_canonicalize_names": "accel_backends",
    "fsdp2_load_full_state_dict": "accel_backends",
    "fsdp2_prepare_auto_wrap_policy": "accel_backends",
    "fsdp2_prepare_model": "accel_backends",
    "fsdp2_switch_optimizer_parameters": "accel_backends",
    "get_fsdp2_grad_scaler": "accel_backends",
    "get_parameters_from_modules": "accel_backends",
    "load_fsdp_model": "accel_backends",
    "load_fsdp_optimizer": "accel_backends",
    "merge_fsdp_weights": "accel_backends",
    "save_fsdp_model": "accel_backends",
    "save_fsdp_optimizer": "accel_backends",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
