"""Triggers: a flag any process can raise for all of them, and a forced gradient sync.

``set_trigger`` / ``check_trigger`` let one process tell every process to stop (early stopping,
a NaN loss seen on one rank). ``set_trigger`` only sets a local flag; ``check_trigger`` is the one
collective: the flags are summed over the processes (one ``all_reduce`` of a scalar), so every
process must call it at the same point of the loop, and every process gets the same answer. A
``True`` answer resets the flag, so the next check is ``False`` until a process sets it again.

``trigger_sync_in_backward(model)`` makes the next backward pass of a DDP model synchronise its
gradients even though the forward pass ran under ``no_sync`` (the pattern of several forward
passes, one synchronising backward). Any other model runs the block unchanged, as in Accelerate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch


class TriggerMixin:
    """``set_trigger``, ``check_trigger`` and ``trigger_sync_in_backward`` for the Accelerator."""

    if TYPE_CHECKING:

        @property
        def device(self) -> torch.device: ...  # ProcessMixin's

    #: This process's trigger flag (a 0-d tensor on ``device``), ``None`` until first used.
    flag_tensor: torch.Tensor | None = None

    def set_trigger(self) -> None:
        """Raise this process's flag; the next :meth:`check_trigger` returns True everywhere.

        Needs no other process: it only sets a local value.
        """
        self.flag_tensor = torch.tensor(1, device=self.device)

    def check_trigger(self) -> bool:
        """Whether any process called :meth:`set_trigger` since the last True answer.

        A collective: call it on every process at the same point. When it answers True, the
        flag is reset on every process.
        """
        from accel_ops import reduce

        if self.flag_tensor is None:
            self.flag_tensor = torch.tensor(0, device=self.device)
        raised = reduce(self.flag_tensor, reduction="sum")
        if int(raised.item()) >= 1:
            self.flag_tensor = torch.tensor(0, device=self.device)
            return True
        return False

    @staticmethod
    @contextlib.contextmanager
    def trigger_sync_in_backward(model: torch.nn.Module) -> Iterator[None]:
        """Synchronise ``model``'s gradients in the next backward pass (DDP models only).

        For a backward pass whose forward ran under ``no_sync``: DDP would otherwise skip the
        synchronisation. The gradients accumulated by earlier backward passes under ``no_sync``
        are averaged together with this one's. Other models run the block as is.
        """
        ddp = _ddp_module(model)
        if ddp is None:
            yield
            return
        saved = (ddp.require_backward_grad_sync, ddp.require_forward_param_sync)
        ddp.require_backward_grad_sync = True
        ddp.require_forward_param_sync = True
        # Arm the reducer as DDP's forward does when it synchronises (no unused parameters).
        ddp.reducer.prepare_for_backward([])
        try:
            yield
        finally:
            ddp.require_backward_grad_sync, ddp.require_forward_param_sync = saved


def _ddp_module(model: torch.nn.Module) -> torch.nn.parallel.DistributedDataParallel | None:
    """``model`` if it is DDP, the DDP module inside ``torch.compile``, else None."""
    ddp_type = torch.nn.parallel.DistributedDataParallel
    if isinstance(model, ddp_type):
        return model
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, ddp_type) else None
