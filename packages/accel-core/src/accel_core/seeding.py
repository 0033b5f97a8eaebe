"""Seed every random number generator, and make the processes' generators agree.

``set_seed`` seeds Python's ``random``, NumPy (when installed), torch's CPU generator, every CUDA
device and, when torch_xla is installed, the XLA generator. ``synchronize_rng_state`` copies the
state of one generator from the main process to all others, which is how shuffling samplers and
dropout masks stay identical across ranks when they need to.
"""

from __future__ import annotations

import importlib.util
import random

import torch

from accel_ops import (
    PartialState,
    RNGType,
    broadcast,
    broadcast_object_list,
    is_torch_xla_available,
)

_SUPPORTED = ("torch", "cuda", "xla", "generator")


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed ``random``, ``numpy``, ``torch`` (CPU and all CUDA devices) and XLA with ``seed``.

    ``device_specific`` adds the process index to the seed, so each process draws different
    numbers from the same configuration (data augmentation, for instance). ``deterministic`` also
    calls ``torch.use_deterministic_algorithms(True)``, which can slow training down and makes
    operations without a deterministic implementation raise.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r} ({type(seed).__name__})")
    if device_specific:
        seed += PartialState().process_index
    random.seed(seed)
    if importlib.util.find_spec("numpy") is not None:
        import numpy as np

        np.random.seed(seed % 2**32)  # NumPy's legacy seeding takes 0 <= seed < 2**32
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)  # deferred until CUDA is initialised; no-op without CUDA
    if is_torch_xla_available():
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)


def _resolve(rng_type: RNGType | str | None, generator: torch.Generator | None) -> RNGType:
    if rng_type is None:
        return RNGType("generator" if generator is not None else "torch")
    try:
        kind = RNGType(rng_type)
    except ValueError:
        kind = None
    if kind is None or kind.value not in _SUPPORTED:
        raise ValueError(
            f"rng_type={rng_type!r} can't be synchronized; choose one of {', '.join(_SUPPORTED)}."
        )
    if kind.value == "generator" and generator is None:
        raise ValueError(
            "rng_type='generator' needs the generator to synchronize: pass generator=..."
        )
    if kind.value == "cuda" and not torch.cuda.is_available():
        raise ValueError("rng_type='cuda' needs CUDA, and torch.cuda.is_available() is False.")
    if kind.value == "xla" and not is_torch_xla_available():
        raise ValueError("rng_type='xla' needs torch_xla: pip install torch_xla.")
    return kind


def synchronize_rng_state(
    rng_type: RNGType | str | None = None, generator: torch.Generator | None = None
) -> None:
    """Give every process the main process's state of one random number generator.

    ``rng_type`` is one of ``"torch"`` (the CPU generator), ``"cuda"`` (the current CUDA device's),
    ``"xla"`` or ``"generator"`` (the ``generator`` passed in); when None it is ``"generator"`` if a
    generator is given, else ``"torch"``. Every process must call it (it is a collective); with a
    single process it does nothing.
    """
    kind = _resolve(rng_type, generator).value
    state = PartialState()
    if state.num_processes == 1:
        return
    if kind == "xla":
        import torch_xla.core.xla_model as xm

        seed = [xm.get_rng_state()]
        broadcast_object_list(seed, from_process=0)
        xm.set_rng_state(int(seed[0]))
        return
    if kind == "generator" and generator is not None:
        generator.set_state(_from_main_process(generator.get_state(), state))
    elif kind == "cuda":
        torch.cuda.set_rng_state(_from_main_process(torch.cuda.get_rng_state(), state))
    else:
        torch.set_rng_state(_from_main_process(torch.get_rng_state(), state))


def _from_main_process(rng_state: torch.Tensor, state: PartialState) -> torch.Tensor:
    """The main process's value of ``rng_state`` (a CPU byte tensor), on the CPU."""
    return broadcast(rng_state.to(state.device), from_process=0).cpu()


def synchronize_rng_states(
    rng_types: list[RNGType | str], generator: torch.Generator | None = None
) -> None:
    """Call :func:`synchronize_rng_state` for each of ``rng_types``, in order."""
    for rng_type in rng_types:
        synchronize_rng_state(rng_type, generator=generator)
