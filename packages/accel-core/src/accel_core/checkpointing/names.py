"""The file names inside a checkpoint folder: Hugging Face Accelerate's, plus our manifest.

Accelerate's ``save_state`` writes ``model.safetensors`` (``model_1.safetensors``... for more
models; ``pytorch_model.bin`` without safetensors), ``optimizer.bin``, ``scheduler.bin``,
``scaler.pt``, ``random_states_<rank>.pkl``, ``custom_checkpoint_<i>.pkl``, ``sampler.bin`` and
``dl_state_dict.bin`` (stateful loaders). Keeping the names lets a run move between the two
libraries mid-training.
"""

from __future__ import annotations

import re

MANIFEST = "accel_checkpoint.json"
SCALER = "scaler.pt"
CHECKPOINTS_FOLDER = "checkpoints"
AUTOMATIC_PATTERN = re.compile(r"^checkpoint_(\d+)$")
CUSTOM_PATTERN = re.compile(r"^custom_checkpoint_(\d+)\.pkl$")


def _indexed(stem: str, index: int, suffix: str) -> str:
    return f"{stem}{suffix}" if index == 0 else f"{stem}_{index}{suffix}"


def model_file(index: int, safe_serialization: bool = True) -> str:
    """``model.safetensors`` / ``model_1.safetensors``, or ``pytorch_model.bin`` / ``..._1.bin``."""
    if safe_serialization:
        return _indexed("model", index, ".safetensors")
    return _indexed("pytorch_model", index, ".bin")


def optimizer_file(index: int) -> str:
    """``optimizer.bin`` / ``optimizer_1.bin``."""
    return _indexed("optimizer", index, ".bin")


def scheduler_file(index: int) -> str:
    """``scheduler.bin`` / ``scheduler_1.bin``."""
    return _indexed("scheduler", index, ".bin")


def sampler_file(index: int) -> str:
    """``sampler.bin`` / ``sampler_1.bin`` (a pickled seedable sampler, read from Accelerate)."""
    return _indexed("sampler", index, ".bin")


def loader_state_file(index: int) -> str:
    """``dl_state_dict.bin`` / ``dl_state_dict_1.bin``: a stateful loader's ``state_dict()``."""
    return _indexed("dl_state_dict", index, ".bin")


def rng_file(process_index: int) -> str:
    """``random_states_<rank>.pkl``: the RNG states and step of one process."""
    return f"random_states_{process_index}.pkl"


def gradients_file(model_index: int, process_index: int) -> str:
    """``accel_gradients_<model>_<rank>.safetensors``: gradients accumulated so far (ours only).

    Written only by a checkpoint taken in the middle of a gradient-accumulation cycle, by every
    process (under DDP each process holds its own unsynchronised gradients then).
    """
    return f"accel_gradients_{model_index}_{process_index}.safetensors"


def custom_file(index: int) -> str:
    """``custom_checkpoint_<i>.pkl``: the ``state_dict()`` of a registered object."""
    return f"custom_checkpoint_{index}.pkl"


def automatic_folder(iteration: int) -> str:
    """``checkpoint_<iteration>``: the folder name with automatic checkpoint naming."""
    return f"checkpoint_{iteration}"
