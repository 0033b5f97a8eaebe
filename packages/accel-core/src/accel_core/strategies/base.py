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
7. Checkpoints (``Accelerator.save_state`` / ``load_state``), in the style of
   torch.distributed.checkpoint's ``StorageWriter``: every call below happens on every process,
   in this order, and the strategy decides which process writes which file.

   Saving, into a :class:`~accel_core.checkpointing.CheckpointWriter` whose ``root`` is a
   temporary folder that becomes the checkpoint only after every process returned:

   a. ``checkpoint_model_states(models)`` -- the state dict of each prepared model as it will be
      written (the save pre-hooks receive this list and may drop entries).
   b. ``checkpoint_optimizer_states(optimizers)`` -- the state dict of each prepared optimizer.
      With ``async_save`` the Accelerator copies both lists to CPU before training continues.
   c. ``save_checkpoint(writer, weights, optimizer_states, safe_serialization=...)`` -- write
      them (possibly from a background thread, when ``supports_async_save``). The default writes
      ``model[_i].safetensors`` and ``optimizer[_i].bin`` from ``writer.is_writer`` processes,
      Accelerate's names. A sharded strategy writes a shard per rank here (torch.distributed.
      checkpoint under ``writer.path("pytorch_model_fsdp_0")``, or an engine's own
      ``save_checkpoint(writer.root, ...)``) and calls ``writer.record(name)`` for what it wrote.
   d. ``checkpoint_extra_state()`` -- JSON-serialisable strategy state kept in the manifest.

   Loading, from a :class:`~accel_core.checkpointing.CheckpointReader` over a finished folder:

   a. ``load_checkpoint(reader, models, optimizers, map_location=..., strict=...)`` -- read and
      check everything first (keys, shapes, parameter groups), then load, so a mismatch changes
      nothing.
   b. ``load_extra_state(state)`` with what ``checkpoint_extra_state`` returned.
8. ``teardown()`` -- from ``Accelerator.end_training()``, after every process finished.

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
    from accel_core.checkpointing import CheckpointReader, CheckpointWriter
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

    #: Whether ``save_checkpoint`` may run in a background thread on CPU copies of the states.
    supports_async_save: ClassVar[bool] = True

    def checkpoint_model_states(self, models: list[torch.nn.Module]) -> list[dict[str, Any]]:
        """The state dict of each prepared model, as written into a checkpoint.

        The default is the state dict of the model inside the wrappers (no ``module.`` prefix
        under DDP), which is what Hugging Face Accelerate 1.15 writes and loads, so either
        library reads the other's checkpoints.
        """
        return [self.unwrap_model(model, keep_torch_compile=False).state_dict() for model in models]

    def checkpoint_optimizer_states(
        self, optimizers: list[torch.optim.Optimizer]
    ) -> list[dict[str, Any]]:
        """The state dict of each prepared optimizer, as written into a checkpoint."""
        return [optimizer.state_dict() for optimizer in optimizers]

    def save_checkpoint(
        self,
        writer: CheckpointWriter,
        weights: list[dict[str, Any]],
        optimizer_states: list[dict[str, Any]],
        *,
        safe_serialization: bool = True,
    ) -> None:
        """Write model and optimizer states (default: from ``writer.is_writer`` processes)."""
        from accel_core.checkpointing import names

        if not writer.is_writer:
            return
        for index, state in enumerate(weights):
            name = names.model_file(index, safe_serialization)
            if safe_serialization:
                writer.write_tensors(name, state)
            else:
                writer.write_object(name, state)
        for index, state in enumerate(optimizer_states):
            writer.write_object(names.optimizer_file(index), state)

    def load_checkpoint(
        self,
        reader: CheckpointReader,
        models: list[torch.nn.Module],
        optimizers: list[torch.optim.Optimizer],
        *,
        map_location: str | torch.device = "cpu",
        strict: bool = True,
    ) -> None:
        """Read every model and optimizer state, check it against its object, then load it."""
        from accel_core.checkpointing import model_states

        model_states.load_all(reader, models, optimizers, map_location=map_location, strict=strict)

    def checkpoint_extra_state(self) -> dict[str, Any]:
        """JSON-serialisable state of the strategy itself, stored in the manifest."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Restore what :meth:`checkpoint_extra_state` returned."""

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
