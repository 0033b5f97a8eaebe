"""Writing and reading objects the way checkpoints need: once per run or node, and atomically.

``save`` writes to a temporary file beside the target and renames it into place with
``os.replace``, so a crash never leaves a half-written file under the final name.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)


def _storage_key(tensor: torch.Tensor) -> tuple[Any, int, int]:
    storage = tensor.untyped_storage()
    return (tensor.device, storage.data_ptr(), storage.nbytes())


def clean_state_dict_for_safetensors(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A state dict safetensors can write: one name per shared storage, contiguous tensors.

    safetensors refuses tensors that share memory (tied weights) and non-contiguous views. The
    first name of each group of tensors sharing a storage is kept, the others are dropped with a
    warning (tied weights are re-tied when the model is loaded).
    """
    groups: dict[tuple[Any, int, int], list[str]] = defaultdict(list)
    for name, value in state_dict.items():
        # Empty tensors have no storage to share (all of them report address 0).
        if isinstance(value, torch.Tensor) and value.device.type != "meta" and value.numel():
            groups[_storage_key(value)].append(name)
    dropped = [name for names in groups.values() if len(names) > 1 for name in names[1:]]
    if dropped:
        logger.warning(
            "Removed shared tensors %s while saving; they share memory with another entry and are "
            "restored when the model re-ties its weights.",
            dropped,
        )
    return {
        name: value.contiguous() if isinstance(value, torch.Tensor) else value
        for name, value in state_dict.items()
        if name not in set(dropped)
    }


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _should_write(save_on_each_node: bool) -> bool:
    from accel_ops import PartialState

    state = PartialState()
    return state.is_local_main_process if save_on_each_node else state.is_main_process


def save(
    obj: Any,
    f: str | os.PathLike[str],
    save_on_each_node: bool = False,
    safe_serialization: bool = False,
) -> None:
    """Write ``obj`` to ``f`` from the main process (each node's with ``save_on_each_node``).

    ``safe_serialization`` writes a dict of tensors with safetensors; otherwise ``torch.save`` is
    used. The write is atomic: a temporary file in the same folder is renamed over ``f``.
    """
    if not _should_write(save_on_each_node):
        return
    target = Path(f)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(descriptor)
    try:
        if safe_serialization:
            from safetensors.torch import save_file

            if not isinstance(obj, dict):
                raise TypeError(
                    f"safe_serialization=True writes a dict of tensors, got {type(obj).__name__}; "
                    "pass a state dict or use safe_serialization=False."
                )
            save_file(clean_state_dict_for_safetensors(obj), temporary, metadata={"format": "pt"})
        else:
            torch.save(obj, temporary)
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; match a plain open()
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load(f: str | os.PathLike[str], map_location: Any = None, **kwargs: Any) -> Any:
    """Read what ``save`` wrote: safetensors files by extension, anything else with ``torch.load``.

    ``torch.load`` runs with ``weights_only=True`` unless the caller passes ``weights_only``;
    then it also rebuilds what :data:`~accel_core.safe_globals.TORCH_SAFE_GLOBALS` lists (the
    numpy arrays of RNG states), as Accelerate's ``load`` does.
    """
    if str(f).endswith(".safetensors"):
        from safetensors.torch import load_file

        device = "cpu" if map_location is None else str(map_location)
        return load_file(f, device=device)
    kwargs.setdefault("weights_only", True)
    if not kwargs["weights_only"]:
        return torch.load(f, map_location=map_location, **kwargs)
    from accel_core.safe_globals import TORCH_SAFE_GLOBALS

    with torch.serialization.safe_globals(TORCH_SAFE_GLOBALS):
        return torch.load(f, map_location=map_location, **kwargs)
