"""The random states of one process, in the layout of Accelerate's ``random_states_<rank>.pkl``.

Keys: ``step``, ``random_state`` (python), ``numpy_random_seed``, ``torch_manual_seed``, and
``torch_cuda_manual_seed`` when CUDA is available. Our own additions (``accel_dataloaders``: where
each prepared loader stands) are extra keys that Accelerate's reader ignores.
"""

from __future__ import annotations

import random
from typing import Any

import torch


def capture(step: int) -> dict[str, Any]:
    """This process's RNG states and the accelerator's step counter."""
    import numpy as np

    states: dict[str, Any] = {
        "step": step,
        "random_state": random.getstate(),
        "numpy_random_seed": np.random.get_state(),
        "torch_manual_seed": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["torch_cuda_manual_seed"] = torch.cuda.get_rng_state_all()
    return states


def restore(states: dict[str, Any]) -> None:
    """Set the python, numpy, torch (and CUDA, when saved and present) generators."""
    import numpy as np

    random.setstate(_python_state(states["random_state"]))
    np.random.set_state(states["numpy_random_seed"])
    torch.set_rng_state(states["torch_manual_seed"])
    cuda = states.get("torch_cuda_manual_seed")
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[: torch.cuda.device_count()])


def _python_state(state: Any) -> tuple[Any, ...]:
    # torch.load gives lists back where pickle gave tuples only when a file was re-saved as JSON;
    # random.setstate insists on tuples.
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
