"""XLA's random number generator, for accel-core's ``set_seed`` and ``synchronize_rng_state``.

The ``xla`` description names :data:`GENERATOR` (``random_generator``); accel-core imports this
module only when it seeds or synchronises, and this module imports torch_xla only when it is
available (``accel_ops.is_torch_xla_available``: installed, and not turned off with
``USE_TORCH_XLA=0``). It implements :class:`accel_core.seeding.EngineRandomGenerator`.
"""

from __future__ import annotations

from accel_ops import is_torch_xla_available


class XLAGenerator:
    """torch_xla's generator (``xm.set_rng_state`` / ``xm.get_rng_state``), as Accelerate's
    ``set_seed`` and ``synchronize_rng_state(RNGType.XLA)`` use it."""

    rng_type: str = "xla"
    #: What ``synchronize_rng_state("xla")`` says is missing without torch_xla (the words of
    #: accel-core 0.4.4, which imported torch_xla itself).
    requirement: str = "torch_xla: pip install torch_xla"

    def is_available(self) -> bool:
        """Whether torch_xla can be used in this process."""
        return is_torch_xla_available()

    def manual_seed(self, seed: int) -> None:
        """Seed the XLA generator of the current device."""
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(seed)

    def get_rng_state(self) -> int:
        """The XLA generator's seed."""
        import torch_xla.core.xla_model as xm

        return int(xm.get_rng_state())

    def set_rng_state(self, state: object) -> None:
        """Set the XLA generator's seed to ``state`` (an int, as :meth:`get_rng_state` gives)."""
        if isinstance(state, bool) or not isinstance(state, int):
            raise TypeError(f"the XLA generator's state is an int seed, got {state!r}")
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(state)


#: The generator the ``xla`` description names.
GENERATOR = XLAGenerator()
