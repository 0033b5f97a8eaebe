"""The ``Strategy`` interface: how one distribution technique prepares and runs the training loop.

``Accelerator`` never asks which kind of distribution it runs under; it calls a ``Strategy``.
accel-core ships ``single_device`` and ``ddp``; accel-backends adds DeepSpeed, FSDP and XLA
through the ``accel.strategies`` entry-point group (see :mod:`accel_core.strategies.registry`).
One small abstract class (three abstract members), in the spirit of Lightning Fabric's
``Strategy``; everything else has a default that a plain data-parallel strategy keeps. The base is
the core (device, environment, precision, setup of module and optimizer, backward, step, clip,
teardown); what only some engines need lives in parts the strategy returns, as Fabric's
Strategy/Precision/CheckpointIO split does: ``precision`` (:class:`~accel_core.precision.
Precision`, scaler included), ``checkpoint_io`` (:class:`~accel_core.strategies.checkpoint_io.
CheckpointIO`: state dicts and checkpoint calls), ``accumulation`` (:class:`~accel_core.
strategies.accumulation_policy.AccumulationPolicy`) and ``compat`` (:class:`~accel_core.
strategies.compat.AccelerateCompat`: Accelerate's questions about the engine). An engine that
needs its own part sets it in ``__init__`` (``self.checkpoint_io = MyCheckpointIO(self)``).

Call order, on every process, for one ``Accelerator``:

1. ``__init__(kwargs_handlers=(), **options)`` -- by the resolver, before any process group
   exists. Cheap: store the options, import nothing heavy.
2. ``setup_environment(state)`` -- once, right after the process state (rank, world size,
   process group) is up. Sets ``compat.distributed_type`` and the device behind ``root_device``,
   and checks that the strategy can run here.
3. ``setup_precision(mode, ...)`` -- once: the strategy builds the :class:`~accel_core.precision.
   Precision` it owns (autocast context, gradient scaler, loss scaling); ``precision`` returns it.
   An engine that scales its loss itself (DeepSpeed) returns one without a scaler.
4. ``accumulation.configure(plugin)`` -- once, BEFORE the process-wide ``GradientState`` is
   created from the returned plugin: an engine that owns accumulation (DeepSpeed's
   ``gradient_accumulation_steps``) reconciles it with its own config here. The prepared
   optimizers read the process-wide ``AcceleratorState`` and ``GradientState`` themselves.
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
   rebuilds the optimizer on the sharded ones); it leaves schedulers as given;
   ``process_dataloader`` for each loader (XLA's device loader). An engine that must see model
   and optimizer together, or replaces schedulers (DeepSpeed), overrides ``setup``. The
   Accelerator then compiles models, and wraps a scheduler the strategy returned unwrapped in
   an ``AcceleratedScheduler``.
7. Each training step: ``backward(loss, **kwargs)`` with the loss divided by the accumulation steps
   unless ``accumulation.owned_by_engine``, and NOT scaled: the default backward scales it through
   ``precision``. ``forward_backward(model, inputs, loss_fn, target)`` is the same step as one call
   (forward, loss, then ``backward`` as above) and the one call a pipelining engine replaces with
   its schedule (micro-batches through the stages); ``Accelerator.forward_backward`` calls it,
   then the preemption vote as after ``backward``. Then, when the user asks,
   ``clip_gradients_norm(module, optimizer, ...)`` or ``clip_gradients_value`` (the Accelerator
   unscales through ``precision`` first), then ``optimizer_step(optimizer, closure)`` from the
   prepared optimizer's ``step`` when gradients synchronise (with an fp16 scaler, the precision's
   scaler drives the step instead).
   Collectives of the Accelerator (``gather``, ``reduce``, ``gather_for_metrics``...) go through
   the strategy when it is :class:`SupportsCollectives` (XLA), else through accel_ops.
8. ``checkpoint_io.model_state_dict(model)`` on every process when saving (the strategy decides
   which ranks hold what; the caller writes only what the main process returns unless the strategy
   shards), and ``checkpoint_io.load_model_state_dict(model, state_dict)`` on every process when
   loading.
9. Checkpoints (``Accelerator.save_state`` / ``load_state``), in the style of
   torch.distributed.checkpoint's ``StorageWriter``: every call below happens on every process,
   in this order, and the strategy's ``checkpoint_io`` decides which process writes which file
   (the calls of a. to d. are its members).

   Saving, into a :class:`~accel_core.checkpointing.CheckpointWriter` whose ``root`` is a
   temporary folder that becomes the checkpoint only after every process returned:

   a. ``checkpoint_model_states(models)`` -- the state dict of each prepared model as it will be
      written (the save pre-hooks receive this list and may drop entries).
   b. ``checkpoint_optimizer_states(optimizers)`` -- the state dict of each prepared optimizer.
      With ``async_save`` the Accelerator copies both lists to CPU before training continues.
   c. ``save_checkpoint(writer, weights, optimizer_states, safe_serialization=...)`` -- write them
      (possibly from a background thread, when ``checkpoint_io.supports_async_save``). The default
      writes ``model[_i].safetensors`` and ``optimizer[_i].bin`` from ``writer.is_writer``
      processes, Accelerate's names. A sharded strategy writes a shard per rank here
      (torch.distributed.checkpoint under ``writer.path("pytorch_model_fsdp_0")``, or an engine's
      own ``save_checkpoint(writer.root, ...)``) and calls ``writer.record(name)`` for what it
      wrote. Any collective it runs here goes over ``writer.group`` (DCP's ``process_group=``):
      ``None`` (the default group) for a plain save, and for ``async_save`` the background saver's
      own gloo group, since the training loop's collectives keep running on the default group; a
      part whose engine can only use the default group sets ``supports_async_save = False``.
   d. ``checkpoint_extra_state()`` -- JSON-serialisable strategy state kept in the manifest.
   e. Inside an accumulation cycle, ``accumulation.accumulated_gradients(model)`` -- this
      process's gradients so far, by parameter name, written per rank beside the model (see
      ``checkpointing.names.gradients_file``).

   Loading, from a :class:`~accel_core.checkpointing.CheckpointReader` over a finished folder:

   a. ``load_checkpoint(reader, models, optimizers, map_location=..., strict=...)`` -- read and
      check everything first (keys, shapes, parameter groups), then load, so a mismatch changes
      nothing.
   b. ``accumulation.restore_accumulated_gradients(model, gradients)`` for each model -- what
      ``accumulated_gradients`` saved for this rank, or ``None`` (the cycle had ended).
   c. ``load_extra_state(state)`` with what ``checkpoint_extra_state`` returned.
10. ``teardown()`` -- from ``Accelerator.end_training()``, after every process finished.

Questions the rest of accel-core asks instead of comparing distribution types are Accelerate's,
answered by ``compat``: ``distributed_type``, ``multi_device``, ``replicates_model`` (LocalSGD),
``plugin`` and ``plugin_slot`` (``AcceleratorState.deepspeed_plugin``), ``flags`` (Accelerate's
yes/no questions about the engine: ``is_fsdp2``). A subclass that still defines a member the base
no longer has (``checkpoint_model_states``, ``handles_accumulation``...) is refused when the
class is created, with the member's new place: it would otherwise be silently ignored.

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
from accel_core.strategies.accumulation_policy import AccumulationPolicy
from accel_core.strategies.checkpoint_io import CheckpointIO
from accel_core.strategies.compat import AccelerateCompat
from accel_core.strategies.parameters import (
    ParameterMap,
    match_parameters,
    prune,
    repoint_optimizer,
)
from accel_core.strategies.step import LossFunction, call_model, loss_to_backward
from accel_core.unwrap import extract_model_from_parallel

if TYPE_CHECKING:
    from accel_core.kwargs_handlers import AutocastKwargs, GradScalerKwargs
    from accel_core.precision import Precision
    from accel_core.state import AcceleratorState

#: Members of the pre-0.4.5 ``Strategy`` and where each went (a subclass defining one is refused).
MOVED_MEMBERS: dict[str, str] = {
    **{
        name: f"checkpoint_io.{name} (a CheckpointIO subclass)"
        for name in (
            "model_state_dict",
            "load_model_state_dict",
            "checkpoint_model_states",
            "checkpoint_optimizer_states",
            "save_checkpoint",
            "load_checkpoint",
            "checkpoint_extra_state",
            "load_extra_state",
            "supports_async_save",
        )
    },
    "handles_accumulation": "accumulation.owned_by_engine (an AccumulationPolicy subclass)",
    "configure_accumulation": "accumulation.configure (an AccumulationPolicy subclass)",
    "accumulated_gradients": "accumulation.accumulated_gradients (an AccumulationPolicy subclass)",
    "restore_accumulated_gradients": (
        "accumulation.restore_accumulated_gradients (an AccumulationPolicy subclass)"
    ),
    **{
        name: f"compat.{name}"
        for name in (
            "distributed_type",
            "multi_device",
            "plugin",
            "plugin_slot",
            "replicates_model",
        )
    },
    "compat_flags": "compat.flags",
    "make_grad_scaler": "setup_precision (build the Precision with the scaler you need)",
    "reduces_gradients_in_step": "nothing (the engine sets GradientState's flag itself)",
    "setup_scheduler": "setup (override it to replace schedulers)",
    "unwrap_model": "accel_core.unwrap.extract_model_from_parallel",
    "accelerator_state": "AcceleratorState() (the process-wide state)",
    "gradient_state": "GradientState() (the process-wide state)",
}

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
    ``compat.distributed_type`` (an ``accel_ops.DistributedType``) and the device
    ``root_device`` returns. Abstract: ``setup_environment``, ``root_device``, ``setup_module``.
    """

    name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        stale = sorted(set(vars(cls)) & set(MOVED_MEMBERS))
        if stale:
            moves = "; ".join(f"{name} -> {MOVED_MEMBERS[name]}" for name in stale)
            raise TypeError(
                f"{cls.__qualname__} defines {', '.join(stale)}, which Strategy no longer has "
                f"(accel-core 0.4.5 moved them into the strategy's parts): {moves}."
            )

    # -- environment and device ----------------------------------------------------------------

    @abstractmethod
    def setup_environment(self, state: AcceleratorState) -> None:
        """Check and finish the process environment; called once after the process group exists."""

    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """The device this process computes on (``Accelerator.device``)."""

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

    # -- precision -----------------------------------------------------------------------------

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
        )
        return self._precision

    @property
    def precision(self) -> Precision:
        """The precision of this strategy (full precision until ``setup_precision`` ran)."""
        if getattr(self, "_precision", None) is None:
            return self.setup_precision("no")
        return self._precision

    # -- the parts an engine returns ------------------------------------------------------------

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """The checkpoint part: state dicts and checkpoint calls (default: :class:`CheckpointIO`,
        one whole model per process; an engine sets its own in ``__init__``)."""
        return self._part("_checkpoint_io", CheckpointIO)

    @checkpoint_io.setter
    def checkpoint_io(self, part: CheckpointIO) -> None:
        self._checkpoint_io = part

    @property
    def accumulation(self) -> AccumulationPolicy:
        """The accumulation policy (default: :class:`AccumulationPolicy`, the Accelerator divides
        the loss; DeepSpeed's engine accumulates itself)."""
        return self._part("_accumulation", AccumulationPolicy)

    @accumulation.setter
    def accumulation(self, part: AccumulationPolicy) -> None:
        self._accumulation = part

    @property
    def compat(self) -> AccelerateCompat:
        """The answers to Hugging Face Accelerate's questions about the engine
        (:class:`AccelerateCompat`: ``distributed_type``, ``multi_device``, the plugin...)."""
        part = self.__dict__.get("_compat")
        if part is None:
            part = self._compat = AccelerateCompat()
        return part

    @compat.setter
    def compat(self, part: AccelerateCompat) -> None:
        self._compat = part

    def _part(self, attribute: str, default: Callable[[Strategy], Any]) -> Any:
        part = self.__dict__.get(attribute)
        if part is None:
            part = default(self)
            setattr(self, attribute, part)
        return part

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
            parameter_map.update(match_parameters(before, extract_model_from_parallel(module)))
            set_up.models.append(module)
        for optimizer, placed in zip(optimizers, optimizer_placement, strict=True):
            set_up.optimizers.append(
                self.setup_optimizer(optimizer, parameter_map, device_placement=placed)
            )
        set_up.schedulers = list(schedulers)
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
        )

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
        the engine must split it as it splits the inputs. ``Accelerator.forward_backward`` calls
        it; a training loop under a pipelining engine makes that call instead of calling the
        model and ``backward``.
        """
        loss = loss_fn(call_model(model, inputs), target)
        from accel_core.gradient_state import GradientState

        steps = GradientState().num_steps
        self.backward(loss_to_backward(loss, steps, self.accumulation.owned_by_engine))
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

    def teardown(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Release what the strategy holds; called by ``Accelerator.end_training()``."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, "
            f"distributed_type={self.compat.distributed_type})"
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
