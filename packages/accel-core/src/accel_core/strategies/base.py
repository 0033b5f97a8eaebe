"""The ``Strategy`` interface: how one distribution technique prepares and runs the training loop.

``Accelerator`` never asks which kind of distribution it runs under; it calls a ``Strategy``.
accel-core ships ``single_device`` and ``ddp``; accel-backends adds DeepSpeed, FSDP and XLA
through the ``accel.strategies`` entry-point group (see :mod:`accel_core.strategies.registry`).
One small abstract class (three abstract members), in the spirit of Lightning Fabric's
``Strategy``; everything else has a default that a plain data-parallel strategy keeps.

Call order, on every process, for one ``Accelerator``:

1. ``__init__(kwargs_handlers=(), **options)`` -- by the resolver, before any process group
   exists. Cheap: store the options, import nothing heavy.
2. ``setup_environment(state)`` -- once, right after the process state (rank, world size,
   process group) is up. Sets ``distributed_type`` and the device behind ``root_device``, and
   checks that the strategy can run here.
3. ``setup_precision(mode, ...)`` -- once: the strategy builds the :class:`~accel_core.precision.
   Precision` it owns (autocast context, gradient scaler, loss scaling); ``precision`` returns it.
   An engine that scales its loss itself (DeepSpeed) returns one without a scaler.
4. ``configure_accumulation(plugin)`` -- once, BEFORE the process-wide ``GradientState`` is
   created from the returned plugin: an engine that owns accumulation (DeepSpeed's
   ``gradient_accumulation_steps``) reconciles it with its own config here. The Accelerator then
   sets ``accelerator_state`` and ``gradient_state`` on the strategy: the default
   ``setup_optimizer`` hands them to the ``AcceleratedOptimizer`` it builds.
5. ``module_init_context(empty_init)`` (only for :class:`SupportsShardedInit`) -- entered by
   ``Accelerator.init_module()`` around the user's model construction (ZeRO-3 ``zero.Init``,
   meta-device init for FSDP).
6. ``setup(models, optimizers, schedulers, dataloaders, ...)`` -- once per ``prepare`` call, with
   every object of that call together (``prepare_model`` and friends make a call with one
   object). Data loaders arrive already sharded with ``distributed_sampler_kwargs``, so an
   engine can read the micro-batch size from them. Models arrive with their forward already
   running under the precision's autocast. The default calls, in this order:
   ``setup_module`` for each model; ``setup_optimizer`` for each optimizer, given a map from the
   parameters the optimizer was built on to the set-up modules' parameters (FSDP2 re-points or
   rebuilds the optimizer on the sharded ones); ``setup_scheduler`` for each scheduler, given
   the set-up optimizers; ``process_dataloader`` for each loader (XLA's device loader). An
   engine that must see model and optimizer together (DeepSpeed) overrides ``setup``. The
   Accelerator then compiles models, and wraps a scheduler the strategy returned unwrapped in
   an ``AcceleratedScheduler``.
7. Each training step: ``backward(loss, **kwargs)`` with the loss divided by the accumulation
   steps unless ``handles_accumulation``, and NOT scaled: the default backward scales it through
   ``precision``. ``forward_backward(model, inputs, loss_fn, target)`` is the same step as one
   call (forward, loss, then ``backward`` as above) and the one call a pipelining engine replaces
   with its schedule (micro-batches through the stages); nothing calls it yet. Then, when the
   user asks, ``clip_gradients_norm(module, optimizer, ...)`` or ``clip_gradients_value`` (the
   Accelerator unscales through ``precision`` first), then ``optimizer_step(optimizer,
   closure)`` from the prepared optimizer's ``step`` when gradients synchronise (with an fp16
   scaler, the precision's scaler drives the step instead).
   Collectives of the Accelerator (``gather``, ``reduce``, ``gather_for_metrics``...) go through
   the strategy when it is :class:`SupportsCollectives` (XLA), else through accel_ops.
8. ``model_state_dict(model)`` on every process when saving (the strategy decides which ranks hold
   what; the caller writes only what the main process returns unless the strategy shards), and
   ``load_model_state_dict(model, state_dict)`` on every process when loading.
9. Checkpoints (``Accelerator.save_state`` / ``load_state``), in the style of
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
      Any collective it runs here goes over ``writer.group`` (DCP's ``process_group=``): ``None``
      (the default group) for a plain save, and for ``async_save`` the background saver's own
      gloo group, since the training loop's collectives keep running on the default group; a
      strategy whose engine can only use the default group sets ``supports_async_save = False``.
   d. ``checkpoint_extra_state()`` -- JSON-serialisable strategy state kept in the manifest.
   e. Inside an accumulation cycle, ``accumulated_gradients(model)`` -- this process's
      gradients so far, by parameter name, written per rank beside the model (see
      ``checkpointing.names.gradients_file``).

   Loading, from a :class:`~accel_core.checkpointing.CheckpointReader` over a finished folder:

   a. ``load_checkpoint(reader, models, optimizers, map_location=..., strict=...)`` -- read and
      check everything first (keys, shapes, parameter groups), then load, so a mismatch changes
      nothing.
   b. ``restore_accumulated_gradients(model, gradients)`` for each model -- what
      ``accumulated_gradients`` saved for this rank, or ``None`` (the cycle had ended).
   c. ``load_extra_state(state)`` with what ``checkpoint_extra_state`` returned.
10. ``teardown()`` -- from ``Accelerator.end_training()``, after every process finished.

Questions the rest of accel-core asks instead of comparing distribution types: ``multi_device``,
``replicates_model`` (LocalSGD), ``reduces_gradients_in_step`` (``GradientState``),
``make_grad_scaler`` (``get_grad_scaler``), ``plugin`` (``AcceleratorState.deepspeed_plugin``),
``compat_flags`` (Accelerate's yes/no questions about the engine: ``is_fsdp2``).

Optional abilities are small runtime-checkable protocols, tested with ``isinstance``:
:class:`SupportsNoSync` (skip gradient synchronisation while accumulating), :class:`SupportsJoin`
(uneven inputs), :class:`SupportsShardedInit` (build a model directly sharded),
:class:`SupportsCollectives` (the engine's own collectives).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch.utils.data import DataLoader

from accel_core.strategies.abilities import (
    CollectiveData,
    SupportsCollectives,
    SupportsJoin,
    SupportsNoSync,
    SupportsShardedInit,
)
from accel_core.strategies.parameters import (
    ParameterMap,
    match_parameters,
    prune,
    repoint_optimizer,
)
from accel_core.strategies.step import LossFunction, call_model, loss_to_backward
from accel_core.unwrap import extract_model_from_parallel

if TYPE_CHECKING:
    from accel_core.checkpointing import CheckpointReader, CheckpointWriter
    from accel_core.gradient_state import GradientAccumulationPlugin, GradientState
    from accel_core.kwargs_handlers import AutocastKwargs, GradScalerKwargs
    from accel_core.precision import Precision
    from accel_core.state import AcceleratorState
    from accel_ops import DistributedType

#: A learning-rate scheduler as ``prepare`` accepts it (torch's, or an engine's own).
Scheduler = Any


@dataclass
class SetupResult:
    """What :meth:`Strategy.setup` returns: the set-up objects, in the order they were given."""

    models: list[torch.nn.Module] = field(default_factory=list)
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    schedulers: list[Scheduler] = field(default_factory=list)
    dataloaders: list[DataLoader[Any]] = field(default_factory=list)


class Strategy(ABC):
    """One way of running the training loop: device, setup, precision, backward, state dicts.

    Subclasses set ``name`` (the registry key), and in ``setup_environment`` the
    ``distributed_type`` (an ``accel_ops.DistributedType``) and the device ``root_device`` returns.
    Abstract: ``setup_environment``, ``root_device``, ``setup_module``.
    """

    name: ClassVar[str] = ""
    #: True for engines that divide the loss by the accumulation steps themselves (DeepSpeed);
    #: the Accelerator then passes the loss undivided to ``backward``.
    handles_accumulation: ClassVar[bool] = False
    #: Whether ``save_checkpoint`` may run in a background thread on CPU copies of the states.
    supports_async_save: ClassVar[bool] = True
    #: Whether every process holds the whole model (LocalSGD averages whole copies).
    replicates_model: ClassVar[bool] = False
    #: Whether the engine reduces gradients inside its own step (XLA under FSDP):
    #: ``GradientState.is_xla_gradients_synced`` then always reads True.
    reduces_gradients_in_step: ClassVar[bool] = False
    distributed_type: DistributedType | None = None
    #: The Accelerate-style plugin object this strategy was created from (``DeepSpeedPlugin``,
    #: ``FullyShardedDataParallelPlugin``...), or None.
    plugin: object | None = None
    #: The ``AcceleratorState`` attribute Accelerate keeps that plugin in (``"fsdp_plugin"``,
    #: ``"deepspeed_plugins"``). When the launch chose the strategy and the Accelerator was given
    #: no plugin, the state shows the strategy's own there, as Accelerate's state does.
    plugin_slot: ClassVar[str | None] = None
    #: The process-wide states, set by the Accelerator after ``configure_accumulation`` (None for
    #: a strategy used without one): the prepared optimizers read their device and
    #: ``sync_gradients`` from them.
    accelerator_state: AcceleratorState | None = None
    gradient_state: GradientState | None = None

    # -- environment and device ----------------------------------------------------------------

    @abstractmethod
    def setup_environment(self, state: AcceleratorState) -> None:
        """Check and finish the process environment; called once after the process group exists."""

    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """The device this process computes on (``Accelerator.device``)."""

    @property
    def multi_device(self) -> bool:
        """Whether processes of this strategy run on several accelerator devices (not CPUs);
        Accelerate's ``Accelerator.multi_device``."""
        return False

    @property
    def compat_flags(self) -> frozenset[str]:
        """The names of Accelerate's yes/no questions about the engine that this strategy answers
        yes to (``"is_fsdp2"``: ``AcceleratorState.is_fsdp2`` and ``Accelerator.is_fsdp2``, when
        the strategy was created from the plugin in its ``plugin_slot``); every other name
        answers no. Default: none. accel-core reads the answers by Accelerate's names and never
        the engine's plugin fields."""
        return frozenset()

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """How data loaders are sharded: ``num_replicas`` shards, this process reads ``rank``
        (by default one shard per process; a strategy whose processes share batches, as the
        ranks of one tensor-parallel group do, counts data-parallel ranks instead)."""
        from accel_ops import PartialState

        state = PartialState()
        return {"num_replicas": state.num_processes, "rank": state.process_index}

    @property
    def data_parallel_group(self) -> torch.distributed.ProcessGroup | None:
        """The process group of the processes reading different batches, which
        ``gather_for_metrics`` gathers over (None: every process, the default). Only read when
        ``distributed_sampler_kwargs`` counts more than one shard."""
        return None

    # -- precision and accumulation ------------------------------------------------------------

    def setup_precision(
        self,
        mode: str,
        *,
        autocast_handler: AutocastKwargs | None = None,
        scaler_handler: GradScalerKwargs | None = None,
    ) -> Precision:
        """Build the precision this strategy owns (``precision`` returns it afterwards)."""
        from accel_core.precision import Precision

        self._precision = Precision(
            mode,
            self.root_device,
            autocast_handler=autocast_handler,
            scaler_handler=scaler_handler,
            scaler_factory=self.make_grad_scaler,
        )
        return self._precision

    @property
    def precision(self) -> Precision:
        """The precision of this strategy (full precision until ``setup_precision`` ran)."""
        if getattr(self, "_precision", None) is None:
            return self.setup_precision("no")
        return self._precision

    def make_grad_scaler(self, device_type: str, **kwargs: Any) -> torch.amp.GradScaler:
        """The fp16 gradient scaler of this strategy (FSDP returns torch's sharded one)."""
        return torch.amp.GradScaler(device_type, **kwargs)

    def configure_accumulation(
        self, plugin: GradientAccumulationPlugin
    ) -> GradientAccumulationPlugin:
        """The accumulation options ``GradientState`` is created from (default: ``plugin``)."""
        return plugin

    # -- setup ---------------------------------------------------------------------------------

    def setup(
        self,
        models: Sequence[torch.nn.Module],
        optimizers: Sequence[torch.optim.Optimizer],
        schedulers: Sequence[Scheduler],
        dataloaders: Sequence[DataLoader[Any]],
        *,
        model_placement: Sequence[bool] | None = None,
        optimizer_placement: Sequence[bool] | None = None,
    ) -> SetupResult:
        """Set up the objects of one ``prepare`` call together (see the module docstring)."""
        model_placement = model_placement or [True] * len(models)
        optimizer_placement = optimizer_placement or [True] * len(optimizers)
        # Kept between prepare calls: an optimizer may be prepared after its model.
        parameter_map: ParameterMap = getattr(self, "_parameter_map", {})
        prune(parameter_map)
        self._parameter_map = parameter_map
        set_up = SetupResult()
        for model, placed in zip(models, model_placement, strict=True):
            before = list(model.named_parameters())
            module = self.setup_module(model, device_placement=placed)
            parameter_map.update(match_parameters(before, self.unwrap_model(module)))
            set_up.models.append(module)
        for optimizer, placed in zip(optimizers, optimizer_placement, strict=True):
            set_up.optimizers.append(
                self.setup_optimizer(optimizer, parameter_map, device_placement=placed)
            )
        set_up.schedulers = [self.setup_scheduler(s, set_up.optimizers) for s in schedulers]
        set_up.dataloaders = [self.process_dataloader(loader) for loader in dataloaders]
        return set_up

    @abstractmethod
    def setup_module(self, module: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        """Move ``module`` to ``root_device`` (if ``device_placement``) and wrap it."""

    def setup_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        parameter_map: ParameterMap,
        *,
        device_placement: bool,
    ) -> torch.optim.Optimizer:
        """The optimizer the loop steps: ``optimizer`` re-pointed (in place) at the set-up
        modules' parameters where ``setup_module`` replaced them, in an ``AcceleratedOptimizer``."""
        from accel_core.optimizer import AcceleratedOptimizer

        repoint_optimizer(optimizer, parameter_map)
        return AcceleratedOptimizer(
            optimizer,
            device_placement=device_placement,
            scaler=self.precision.scaler,
            step_function=self.optimizer_step,
            accelerator_state=self.accelerator_state,
            gradient_state=self.gradient_state,
        )

    def setup_scheduler(
        self, scheduler: Scheduler, optimizers: Sequence[torch.optim.Optimizer]
    ) -> Scheduler:
        """The scheduler as the strategy wants it (default: unchanged; the Accelerator wraps it)."""
        return scheduler

    def process_dataloader(self, dataloader: DataLoader[Any]) -> DataLoader[Any]:
        """The sharded ``dataloader`` as this strategy iterates it (default: unchanged)."""
        return dataloader

    # -- the training step ---------------------------------------------------------------------

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backpropagate ``loss`` (divided by the accumulation steps, not yet scaled): the
        precision scales it, then ``backward``."""
        self.precision.backward(loss, **kwargs)

    def forward_backward(
        self,
        model: torch.nn.Module,
        inputs: object,
        loss_fn: LossFunction,
        target: object = None,
    ) -> torch.Tensor:
        """Forward and backward of one batch in one call; returns the batch's loss (detached,
        not divided by the accumulation steps), for logging.

        The default runs the prepared ``model`` on ``inputs`` (a mapping as keyword arguments, a
        tuple as positional arguments, anything else as the one argument:
        :func:`~accel_core.strategies.step.call_model`), then ``loss_fn(outputs, target)``,
        then :meth:`backward` with the loss divided by the accumulation steps unless
        ``handles_accumulation``: the same arithmetic as ``loss = loss_fn(model(inputs),
        target)`` followed by ``accelerator.backward(loss)`` (the precision scales the loss; the
        Accelerator's own additions around ``backward``, LOMO's fused update and the preemption
        vote, are not part of it).

        This is the one call a pipelining engine replaces with its schedule. With the model
        split into stages over a ``pp`` mesh dimension, no process can run the whole forward,
        so the engine splits ``inputs`` and ``target`` into micro-batches along the batch
        dimension, runs its schedule (GPipe, 1F1B, interleaved: the micro-batches' forwards and
        backwards interleaved across the stages, activations and their gradients sent between
        neighbouring stages), applies ``loss_fn`` to each micro-batch's outputs and target on
        the last stage, backpropagates each micro-batch's share of the loss (through its
        precision, divided by the micro-batches and the accumulation steps as above), and
        returns the batch's loss on every stage. That is why ``target`` is its own argument:
        the engine must split it as it splits the inputs. The Accelerator has no API for this
        call yet; a training loop under a pipelining engine would make it instead of calling
        the model and ``backward``.
        """
        loss = loss_fn(call_model(model, inputs), target)
        steps = self.gradient_state.num_steps if self.gradient_state is not None else 1
        self.backward(loss_to_backward(loss, steps, self.handles_accumulation))
        return loss.detach()

    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        closure: Callable[[], Any] | None = None,
    ) -> Any:
        """Step the inner ``optimizer`` (XLA: ``xm.optimizer_step``); returns the closure's loss."""
        return optimizer.step(closure) if closure is not None else optimizer.step()

    def clip_gradients_norm(
        self,
        module: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        parameters: Iterable[torch.nn.Parameter] | None = None,
    ) -> torch.Tensor:
        """Clip the total gradient norm to ``max_norm``; return it (before clipping).

        ``module`` is the prepared model the parameters belong to (None when they belong to none
        of them), ``optimizer`` the prepared optimizer holding them (or None); ``parameters``
        defaults to the module's. A sharded strategy computes the norm over every shard (FSDP:
        the module's ``clip_grad_norm_``); an engine clips itself. Gradients are unscaled already.
        """
        if parameters is None:
            if module is None:
                raise ValueError("clip_gradients_norm needs a module or parameters")
            parameters = module.parameters()
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_gradients_value(
        self, parameters: Iterable[torch.nn.Parameter], clip_value: float
    ) -> None:
        """Clamp every gradient of ``parameters`` into ``[-clip_value, clip_value]``."""
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    # -- state dicts and checkpoints -----------------------------------------------------------

    def accumulated_gradients(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The gradients ``model`` holds inside an accumulation cycle, by parameter name, as
        this process saves them when a checkpoint falls mid-cycle (default: each parameter's
        ``.grad``). An engine that keeps them elsewhere (FSDP2's unsharded accumulation
        buffers) returns those."""
        return {
            name: parameter.grad
            for name, parameter in self.unwrap_model(model).named_parameters()
            if parameter.grad is not None
        }

    def restore_accumulated_gradients(
        self, model: torch.nn.Module, gradients: dict[str, torch.Tensor] | None
    ) -> None:
        """Put back what :meth:`accumulated_gradients` returned (``None``: the checkpoint was at
        the end of a cycle, so no gradient is kept)."""
        for name, parameter in self.unwrap_model(model).named_parameters():
            if gradients is None or name not in gradients:
                parameter.grad = None
            else:
                parameter.grad = gradients[name].to(parameter.device, parameter.dtype)

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The state dict of the unwrapped model, gathered as this strategy requires."""
        return self.unwrap_model(model).state_dict()

    def load_model_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        """Load ``state_dict`` into the (wrapped) model."""
        self.unwrap_model(model).load_state_dict(state_dict)

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

        model_states.load_all(
            reader,
            models,
            optimizers,
            map_location=map_location,
            strict=strict,
            unwrap=self.unwrap_model,
        )

    def checkpoint_extra_state(self) -> dict[str, Any]:
        """JSON-serialisable state of the strategy itself, stored in the manifest."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Restore what :meth:`checkpoint_extra_state` returned."""

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


__all__ = [
    "CollectiveData",
    "Scheduler",
    "SetupResult",
    "Strategy",
    "SupportsCollectives",
    "SupportsJoin",
    "SupportsNoSync",
    "SupportsShardedInit",
]
