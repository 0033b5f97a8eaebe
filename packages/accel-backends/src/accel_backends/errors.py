"""The errors of accel-backends: a strategy not built yet, and an engine that isn't installed.

Names that belong to a strategy (DeepSpeed, FSDP, XLA) exist now so that ported code imports;
what needs the strategy itself raises :class:`StrategyNotBuiltError` until it lands, and what needs
an engine package raises :class:`EngineNotInstalledError` with the ``pip install`` line. Features
accel does not run at all (Megatron-LM, tensor and context parallelism) raise accel-core's
``OutOfScopeError``.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

#: What to install for each optional engine.
ENGINE_INSTALL = {
    "deepspeed": "pip install 'accel-backends[deepspeed]'",
    "torch_xla": "pip install 'accel-backends[xla]'",
}


class StrategyNotBuiltError(NotImplementedError):
    """The call needs a strategy of accel-backends that is not built yet."""


class EngineNotInstalledError(ImportError):
    """The call needs an optional engine (DeepSpeed, torch_xla) that is not installed."""


def strategy_not_built(strategy: str, what: str) -> StrategyNotBuiltError:
    """The error for ``what`` (e.g. ``"save_fsdp_model"``), which needs ``strategy``'s strategy.

    ``strategy`` is the engine's name as users write it: ``"DeepSpeed"``, ``"FSDP"``, ``"XLA"``.
    """
    return StrategyNotBuiltError(
        f"{what} needs the {strategy} strategy of accel-backends, which is not built yet; until it "
        "is, train with the ddp strategy (accel launch --multi_gpu, or --cpu with several "
        "processes)"
    )


def require_engine(module: str, what: str) -> ModuleType:
    """Import the engine ``module`` (``"deepspeed"``, ``"torch_xla"``) for ``what``, or say how
    to install it."""
    if importlib.util.find_spec(module) is None:
        raise EngineNotInstalledError(
            f"{what} needs {module}, which is not installed: {ENGINE_INSTALL[module]}"
        )
    return importlib.import_module(module)
