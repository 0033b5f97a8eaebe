"""The ``xla`` strategy's checkpoint part: states copied to CPU before anything is written,
files read and checked on CPU before anything is loaded (:mod:`.checkpoint`), and the XLA random
generator's seed kept in the manifest."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch

from accel_backends.xla.checkpoint import load_states
from accel_backends.xla.tensors import to_cpu
from accel_core.strategies.checkpoint_io import CheckpointIO
from accel_core.unwrap import extract_model_from_parallel

if TYPE_CHECKING:
    from accel_backends.xla.strategy import XLAStrategy
    from accel_core.checkpointing import CheckpointReader

#: The manifest key of the XLA random generator's seed.
_EXTRA_STATE_RNG = "xla_rng_state"


class XLACheckpointIO(CheckpointIO):
    """State dicts and checkpoints of the ``xla`` strategy."""

    #: The model and optimizer states handed to the background writer are CPU copies already.
    supports_async_save: ClassVar[bool] = True
    strategy: XLAStrategy

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The unwrapped model's state dict as CPU tensors (tied weights stay tied). The model
        keeps its mixed-precision forward (unwrapping with ``keep_fp32_wrapper=False`` would
        remove it for good)."""
        return to_cpu(extract_model_from_parallel(model).state_dict(keep_vars=True))

    def checkpoint_model_states(self, models: list[torch.nn.Module]) -> list[dict[str, Any]]:
        """Each model's state dict as CPU tensors, keyed as every strategy keys it.

        Raises ``CheckpointError`` inside an accumulation cycle: accel-core would write the
        accumulated gradients, which are XLA tensors, without asking the strategy for them.
        """
        if not _sync_gradients():
            from accel_core.checkpointing import CheckpointError

            raise CheckpointError(
                "save_state with strategy 'xla' inside a gradient accumulation cycle is not "
                "supported yet (the accumulated gradients are XLA tensors, which accel-core "
                "can't write); call save_state after the step that synchronises gradients "
                "(accelerator.sync_gradients is True)."
            )
        return [
            to_cpu(
                extract_model_from_parallel(m, keep_torch_compile=False).state_dict(keep_vars=True)
            )
            for m in models
        ]

    def checkpoint_optimizer_states(
        self, optimizers: list[torch.optim.Optimizer]
    ) -> list[dict[str, Any]]:
        """Each optimizer's state dict as CPU tensors."""
        return [to_cpu(optimizer.state_dict()) for optimizer in optimizers]

    def load_checkpoint(
        self,
        reader: CheckpointReader,
        models: list[torch.nn.Module],
        optimizers: list[torch.optim.Optimizer],
        *,
        map_location: str | torch.device = "cpu",
        strict: bool = True,
    ) -> None:
        """Read and check every state on CPU, then copy it onto the XLA device."""
        load_states(reader, models, optimizers, extract_model_from_parallel, strict=strict)

    def checkpoint_extra_state(self) -> dict[str, Any]:
        """The XLA random generator's seed (Accelerate keeps it as ``xm_seed``)."""
        import torch_xla.core.xla_model as xm

        return {_EXTRA_STATE_RNG: int(xm.get_rng_state(self.strategy.device))}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore the XLA random generator's seed."""
        if _EXTRA_STATE_RNG in state:
            import torch_xla.core.xla_model as xm

            xm.set_rng_state(int(state[_EXTRA_STATE_RNG]), self.strategy.device)


def _sync_gradients() -> bool:
    from accel_core.gradient_state import GradientState

    return bool(GradientState().sync_gradients)


__all__ = ["XLACheckpointIO"]
