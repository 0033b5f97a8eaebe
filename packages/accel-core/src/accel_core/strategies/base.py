"""The ``Strategy`` interface: how one distribution technique prepares and runs the training loop.

``Accelerator`` never asks which kind of distribution it runs under; it calls a ``Strategy``.
accel-core ships ``single_device`` and ``ddp``; accel-backends adds DeepSpeed, FSDP and XLA
through the ``accel.strategies`` entry-point group (see :mod:`accel_core.strategies.registry`).

Call order, on every process, for one ``Accelerator``:

1. ``__init__(**options)`` -- by the resolver, before any process group exists. Cheap: store the
   options, import nothing heavy.
2. ``setup_environment(state)`` -- once, right after the process state (rank, world size, device,
   process group) is up. Sets ``distributed_type`` and checks that the strategy can run here.
3. ``wrap_model(model, device_placement=...)`` -- once per model given to ``prepare``, before any
   optimizer is wrapped. The model already runs its forward under the mixed-precision context.
4. ``wrap_optimizer(optimizer, device_placement=..., scaler=...)`` -- once per optimizer, after
   every model of the same ``prepare`` call was wrapped.
5. Each training step: ``backward(loss, **kwargs)`` with the loss already divided by the
   accumulation steps (unless ``handles_accumulation``) and scaled for fp16; then, when the
   user asks, ``clip_gradients_norm`` or ``clip_gradients_value`` (gradients unscaled first).
6. ``model_state_dict(model)`` on every process when saving (the strategy decides which ranks hold
   what; the caller writes only what the main process returns unless the strategy shards), and
   ``load_model_state_dict(model, state_dict)`` on every process when loading.
7. ``teardown()`` -- from ``Accelerator.end_training()``, after every process finished.

Optional abilities are small runtime-checkable protocols, tested with ``isinstance``:
:class:`SupportsNoSync` (skip gradient synchronisation while accumulating), :class:`SupportsJoin`
(uneven inputs), :class:`SupportsShardedInit` (build a model directly sharded).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import torch

from accel_core.unwrap import extract_model_from_parallel

if TYPE_CHECKING:
    from accel_core.state import AcceleratorState


class Strategy(ABC):
    """One way of running the training loop: device placement, wrappers, backward, state dicts.

    Subclasses set ``name`` (the registry key) and, in ``setup_environment``, ``distributed_type``
    (an ``accel_ops.DistributedType`` such as ``NO``, ``MULTI_CPU``, ``MULTI_GPU``, ``DEEPSPEED``).
    """

    name: ClassVar[str] = ""
    #: True for engines that divide the loss by the accumulation steps themselves (DeepSpeed);
    #: the Accelerator then passes the loss undivided to ``backward``.
    handles_accumulation: ClassVar[bool] = False
    distributed_type: Any = None

    @abstractmethod
    def setup_environment(self, state: AcceleratorState) -> None:
        """Check and finish the process environment; called once after the process group exists."""

    @abstractmethod
    def wrap_model(self, model: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        """Move ``model`` to the device (if ``device_placement``) and wrap it for this strategy."""

    @abstractmethod
    def wrap_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        device_placement: bool,
        scaler: torch.amp.GradScaler | None,
    ) -> torch.optim.Optimizer:
        """The optimizer the loop steps (an ``AcceleratedOptimizer``, or an engine's)."""

    @abstractmethod
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backpropagate ``loss`` (already divided by the accumulation steps and scaled)."""

    @abstractmethod
    def clip_gradients_norm(
        self, parameters: Iterable[torch.nn.Parameter], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clip the total gradient norm of ``parameters`` to ``max_norm``; return it (before)."""

    @abstractmethod
    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The state dict of the unwrapped model, gathered as this strategy requires."""

    @abstractmethod
    def load_model_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        """Load ``state_dict`` into the (wrapped) model."""

    def clip_gradients_value(
        self, parameters: Iterable[torch.nn.Parameter], clip_value: float
    ) -> None:
        """Clamp every gradient of ``parameters`` into ``[-clip_value, clip_value]``."""
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def unwrap_model(
        self,
        model: torch.nn.Module,
        keep_fp32_wrapper: bool = True,
        keep_torch_compile: bool = True,
    ) -> torch.nn.Module:
        """The user's model inside this strategy's wrappers."""
        return extract_model_from_parallel(model, keep_fp32_wrapper, keep_torch_compile)

    def teardown(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Release what the strategy holds; called by ``Accelerator.end_training()``."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, distributed_type={self.distributed_type})"
        )


@runtime_checkable
class SupportsNoSync(Protocol):
    """A strategy that can skip gradient synchronisation for one backward pass."""

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """A context in which backward passes through ``model`` do not synchronise gradients."""
        ...


@runtime_checkable
class SupportsJoin(Protocol):
    """A strategy that can train on inputs of different lengths per process."""

    def join(self, joinables: list[Any]) -> contextlib.AbstractContextManager[Any]:
        """A context in which processes that ran out of batches shadow the collectives of others."""
        ...


@runtime_checkable
class SupportsShardedInit(Protocol):
    """A strategy that can build a model directly sharded or on the meta device."""

    def module_init_context(
        self, empty_init: bool | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """A context under which modules are created the way this strategy wants them."""
        ...
