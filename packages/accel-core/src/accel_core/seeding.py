"""Seed every random number generator, and make the processes' generators agree.

``set_seed`` seeds Python's ``random``, NumPy (when installed), torch's CPU generator, every CUDA
device and each installed engine's own generator (XLA's, through its description's
``random_generator``: :class:`EngineRandomGenerator`). ``synchronize_rng_state`` copies the state
of one generator from the main process to all others, which is how shuffling samplers and dropout
masks stay identical across ranks when they need to.
"""

from __future__ import annotations

import importlib.util
import random
from typing import Protocol, cast

import torch

from accel_core.built_in_engines import ENGINE_HINT
from accel_ops import PartialState, RNGType, broadcast, broadcast_object_list

#: The generators accel-core synchronises itself; an engine adds its own (``rng_type``).
_BUILT_IN = ("torch", "cuda", "generator")


class EngineRandomGenerator(Protocol):
    """A random number generator an engine owns, named by its description's
    ``random_generator`` (``"module:attribute"``, imported only when seeding or synchronising).

    ``set_seed(seed)`` calls ``manual_seed(seed)`` when ``is_available()``.
    ``synchronize_rng_state(rng_type)`` with this ``rng_type`` raises ``ValueError`` naming
    ``requirement`` when it is not available; with several processes, every process then calls
    ``get_rng_state()``, the main process's value is broadcast (``broadcast_object_list``: it must
    pickle), and every process calls ``set_rng_state`` with it.

    Attributes:
        rng_type: the name ``rng_types`` selects it by (an ``accel_ops.RNGType`` value).
        requirement: what it needs and how to install that, for the error.
    """

    rng_type: str
    requirement: str

    def is_available(self) -> bool:
        """Whether the generator can be used in this process."""
        ...

    def manual_seed(self, seed: int) -> None:
        """Seed the generator."""
        ...

    def get_rng_state(self) -> object:
        """The generator's state (picklable)."""
        ...

    def set_rng_state(self, state: object) -> None:
        """Set the generator's state to one ``get_rng_state`` returned."""
        ...


def _engine_generators() -> dict[str, EngineRandomGenerator]:
    """The installed engines' own generators, by ``rng_type`` (imports each one named)."""
    from accel_base import engine_description

    found: dict[str, EngineRandomGenerator] = {}
    for description in engine_description.installed_engines().values():
        if description.random_generator is not None:
            hook = engine_description.load_hook(description.random_generator)
            generator = cast("EngineRandomGenerator", hook)
            found.setdefault(generator.rng_type, generator)
    return found


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed ``random``, ``numpy``, ``torch`` (CPU and all CUDA devices) and each installed engine's
    own generator (XLA's, when torch_xla is installed) with ``seed``.

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
    for generator in _engine_generators().values():
        if generator.is_available():
            generator.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)


def _resolve(
    rng_type: RNGType | str | None, generator: torch.Generator | None
) -> tuple[str, EngineRandomGenerator | None]:
    """The kind of generator to synchronise, and the engine's generator when it is one."""
    if rng_type is None:
        return ("generator" if generator is not None else "torch"), None
    try:
        kind: RNGType | None = RNGType(rng_type)
    except ValueError:
        kind = None
    if kind is not None and kind.value in _BUILT_IN:
        if kind.value == "generator" and generator is None:
            raise ValueError(
                "rng_type='generator' needs the generator to synchronize: pass generator=..."
            )
        if kind.value == "cuda" and not torch.cuda.is_available():
            raise ValueError("rng_type='cuda' needs CUDA, and torch.cuda.is_available() is False.")
        return kind.value, None
    engines = _engine_generators()
    if kind is None or kind.value not in engines:
        choices = ", ".join([*_BUILT_IN[:-1], *engines, _BUILT_IN[-1]])
        # a generator of Accelerate's list while no installed engine has one: say what to install
        hint = (
            f" An engine's own generator can be synchronized once the engine is installed. "
            f"{ENGINE_HINT}"
            if kind is not None and not engines
            else ""
        )
        raise ValueError(
            f"rng_type={rng_type!r} can't be synchronized; choose one of {choices}.{hint}"
        )
    engine = engines[kind.value]
    if not engine.is_available():
        raise ValueError(f"rng_type={kind.value!r} needs {engine.requirement}.")
    return kind.value, engine


def synchronize_rng_state(
    rng_type: RNGType | str | None = None, generator: torch.Generator | None = None
) -> None:
    """Give every process the main process's state of one random number generator.

    ``rng_type`` is one of ``"torch"`` (the CPU generator), ``"cuda"`` (the current CUDA device's),
    ``"generator"`` (the ``generator`` passed in) or an installed engine's own generator
    (``"xla"``: :class:`EngineRandomGenerator`); when None it is ``"generator"`` if a generator is
    given, else ``"torch"``. Every process must call it (it is a collective); with a single
    process it does nothing.
    """
    kind, engine = _resolve(rng_type, generator)
    state = PartialState()
    if state.num_processes == 1:
        return
    if engine is not None:
        rng_state = [engine.get_rng_state()]
        broadcast_object_list(rng_state, from_process=0)
        engine.set_rng_state(rng_state[0])
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
