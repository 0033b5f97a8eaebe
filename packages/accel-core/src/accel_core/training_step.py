"""The training-step part of ``Accelerator``'s API: ``backward``, ``forward_backward``,
``accumulate``, clipping.

``TrainingStepMixin`` reads the strategy (backward, clipping, no-sync), the precision (scaling,
autocast), the process-wide ``GradientState`` and the Accelerator's
:class:`~accel_core.accumulation.Accumulation` (which owns ``step``) and
:class:`~accel_core.prepared_objects.PreparedObjects` (the optimizers to unscale, the owners of
clipped parameters). Nothing here adds work to a step beyond what it did as one class.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from accel_core import settings
from accel_core.optimizer import lomo_backward, unwrap_optimizer
from accel_core.strategies.step import LossFunction, loss_to_backward
from accel_ops import inflight

if TYPE_CHECKING:
    from accel_core.accumulation import Accumulation
    from accel_core.gradient_state import GradientState
    from accel_core.kwargs_handlers import AutocastKwargs
    from accel_core.precision import Precision
    from accel_core.preemption import PreemptionWatch
    from accel_core.prepared_objects import PreparedObjects
    from accel_core.strategies import Strategy


class TrainingStepMixin:
    """``backward``, ``accumulate``, ``no_sync``, gradient clipping and unscaling, ``autocast``
    and the accumulation counters, for the ``Accelerator``."""

    strategy: Strategy
    precision: Precision
    scaler: torch.amp.GradScaler | None
    gradient_state: GradientState
    _accumulation: Accumulation
    _prepared: PreparedObjects
    _preemption: PreemptionWatch | None

    @property
    def gradient_accumulation_steps(self) -> int:
        """Batches per optimizer step."""
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        settings.check_steps(steps)
        self.gradient_state.plugin_kwargs.update({"num_steps": steps})

    @property
    def sync_gradients(self) -> bool:
        """Whether this batch synchronises gradients and steps the optimizer."""
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state._set_sync_gradients(value)

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """Whether the last optimizer step was skipped (fp16 overflow)."""
        return self._prepared.optimizer_step_was_skipped

    @property
    def step(self) -> int:
        """Batches counted by ``accumulate`` (saved and restored by checkpoints; assignable)."""
        return self._accumulation.step

    @step.setter
    def step(self, value: int) -> None:
        self._accumulation.step = value

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backpropagate ``loss``: divided by the accumulation steps, scaled for fp16.

        With a LOMO optimizer prepared and ``learning_rate=`` given (and no fp16 scaler), the
        optimizer's fused backward-and-update runs instead, as in Accelerate.
        """
        steps = self.gradient_state.num_steps
        loss = loss_to_backward(loss, steps, self.strategy.accumulation.owned_by_engine)
        learning_rate = kwargs.get("learning_rate")
        if learning_rate is not None and self._prepared.has_lomo_optimizer and self.scaler is None:
            self.lomo_backward(loss, learning_rate)
            return
        # Under DDP the gradients are all-reduced inside backward: the hang report shows it.
        # The strategy scales the loss (through its precision; an engine scales it itself).
        with inflight.waiting_in("backward", loss):
            self.strategy.backward(loss, **kwargs)
        self._after_backward()

    def forward_backward(
        self,
        model: torch.nn.Module,
        inputs: object,
        loss_fn: LossFunction,
        target: object = None,
    ) -> torch.Tensor:
        """Forward, loss and backward of one batch in one call; returns the batch's loss
        (detached, not divided by the accumulation steps), for logging.

        ``model`` runs on ``inputs`` (a mapping as keyword arguments, a tuple as positional
        arguments, anything else as the one argument), then ``loss_fn(outputs, target)``. Under
        every strategy but a pipelining one this is ``loss = loss_fn(model(inputs), target)``
        followed by ``accelerator.backward(loss)``, with the same arithmetic (accumulation,
        precision scaling, the preemption vote); under pipeline parallelism (``pp_size > 1``)
        the strategy runs its schedule instead, micro-batches of ``inputs`` and ``target``
        through the stages, and every stage gets the batch's loss. A training loop written with
        it runs under every strategy; ``accelerator.backward`` cannot run under ``pp``.
        """
        with inflight.waiting_in("backward"):
            loss = self.strategy.forward_backward(model, inputs, loss_fn, target)
        self._after_backward()
        return loss

    def _after_backward(self) -> None:
        if self._preemption is not None:
            self._preemption.after_backward()  # the ranks vote on stopping (accel_core.preemption)

    def accumulate(self, *models: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Context for one batch of gradient accumulation (see :mod:`accel_core.accumulation`)."""
        return self._accumulation.accumulate(models)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Context in which backward passes do not synchronise ``model``'s gradients."""
        return self._accumulation.no_sync(model)

    def lomo_backward(self, loss: torch.Tensor, learning_rate: float) -> None:
        """Backward and update in one pass on the prepared LOMO optimizers (``lomo-optim``'s
        ``Lomo`` / ``AdaLomo``: optimizers with a ``fused_backward(loss, lr)``)."""
        lomo_backward(self._prepared.optimizers, loss, learning_rate)

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Divide fp16 gradients by the loss scale (before clipping or inspecting them)."""
        if self.scaler is None:
            return
        optimizers = self._prepared.optimizers if optimizer is None else optimizer
        if not isinstance(optimizers, (list, tuple)):
            optimizers = [optimizers]
        for opt in optimizers:
            self.precision.unscale_gradients(unwrap_optimizer(opt))

    def clip_grad_norm_(
        self, parameters: Iterable[torch.nn.Parameter], max_norm: float, norm_type: float = 2
    ) -> torch.Tensor:
        """Clip the gradient norm of ``parameters``; returns the total norm before clipping.

        The strategy is given the prepared model and optimizer the parameters belong to."""
        self.unscale_gradients()
        parameters = list(parameters)
        module, optimizer = self._prepared.owners_of(parameters)
        return self.strategy.clip_gradients_norm(
            module, optimizer, max_norm, norm_type, parameters=parameters
        )

    def clip_grad_value_(self, parameters: Iterable[torch.nn.Parameter], clip_value: float) -> None:
        """Clamp the gradients of ``parameters`` into ``[-clip_value, clip_value]``."""
        self.unscale_gradients()
        self.strategy.clip_gradients_value(parameters, clip_value)

    def autocast(
        self, autocast_handler: AutocastKwargs | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """The mixed-precision autocast context (a null context with ``mixed_precision="no"``)."""
        return self.precision.autocast(autocast_handler)
