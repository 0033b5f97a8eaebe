"""What ``prepare`` refuses for models loaded in 8-bit or 4-bit (bitsandbytes), as Accelerate does.

transformers marks such models ``is_loaded_in_8bit`` / ``is_loaded_in_4bit`` and records where
``from_pretrained(device_map=...)`` put each block in ``hf_device_map``. Their quantized weights
can't be trained across several devices in a distributed run, nor from CPU (without bitsandbytes'
multi-backend build) or disk offload. The messages start with Accelerate's words.
"""

from __future__ import annotations

import torch

from accel_ops import is_bitsandbytes_multi_backend_available


def is_placed_quantized(model: torch.nn.Module) -> bool:
    """Whether ``model`` was loaded in 8-bit or 4-bit with a device map (what the check reads)."""
    quantized = getattr(model, "is_loaded_in_8bit", False) or getattr(
        model, "is_loaded_in_4bit", False
    )
    return bool(quantized and getattr(model, "hf_device_map", None))


def check_quantized_placement(model: torch.nn.Module, num_processes: int) -> None:
    """Raise ``ValueError`` when ``model`` is 8-bit or 4-bit and its device map can't be trained:
    several devices with more than one process, or a ``"cpu"`` (without bitsandbytes'
    multi-backend) or ``"disk"`` entry."""
    if not is_placed_quantized(model):
        return
    device_map = model.hf_device_map
    devices = {str(device) for device in device_map.values()}
    if len(devices) > 1 and num_processes > 1:
        raise ValueError(
            "You can't train a model that has been loaded in 8-bit or 4-bit precision on multiple "
            f"devices in any distributed mode: its hf_device_map places it on {sorted(devices)} "
            f"and this run has {num_processes} processes. Load it on one device per process "
            "(device_map={'': local_rank}), or run one process."
        )
    offloaded = sorted(devices & {"disk"} | (devices & {"cpu"}))
    if "cpu" in devices and is_bitsandbytes_multi_backend_available():
        offloaded.remove("cpu")
    if offloaded:
        raise ValueError(
            "You can't train a model that has been loaded in 8-bit or 4-bit precision with CPU or "
            f"disk offload: its hf_device_map sends blocks to {offloaded}. Load it with more "
            "accelerator memory (max_memory) or without quantization; training on CPU needs "
            "bitsandbytes' multi-backend build."
        )
