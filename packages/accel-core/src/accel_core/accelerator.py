"""``Accelerator``: the one object a training script talks to.

It reads the launch environment, chooses a :class:`~accel_core.Strategy` through the resolver,
and then only delegates: preparation (:mod:`accel_core.preparation`), accumulation
(:mod:`accel_core.accumulation`), metrics gathering (:mod:`accel_core.metrics`), precision
(:mod:`accel_core.precision`), process queries (:mod:`accel_core.process_api`). It never branches
on the kind of distribution: the strategy answers for it.
"""

from __future__ import annotations

import contextlib
import os
import warnings
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from accel_core import accumulation, engine_options, metrics, preparation, profiling, settings
from accel_core.checkpointing.mixin import CheckpointingMixin
from accel_core.collectives import collectives_of
from accel_core.configuration import (
    DataLoaderConfiguration,
    ProjectConfiguration,
    TorchDynamoPlugin,
)
from accel_core.kwargs_handlers import (
    AutocastKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    ProfileKwargs,
    collect_handlers,
)
from accel_core.optimizer import lomo_backward, unwrap_optimizer
from accel_core.parallelism import (
    ParallelismConfigLike,
    ParallelismMixin,
    check_sizes,
    check_strategy,
    setup_device_mesh,
    wants_sharding,
)
from accel_core.precision import Precision
from accel_core.process_api import ProcessMixin
from accel_core.read_back import ReadBackMixin
from accel_core.scheduler import AcceleratedScheduler
from accel_core.state import AcceleratorState
from accel_core.strategies import (
    Strategy,
    SupportsJoin,
    SupportsShardedInit,
    resolve_strategy,
)
from accel_core.tracking.mixin import TrackingMixin
from accel_core.triggers import TriggerMixin
from accel_ops import inflight


class Accelerator(
    ProcessMixin,
    CheckpointingMixin,
    TrackingMixin,
    ParallelismMixin,
    TriggerMixin,
    ReadBackMixin,
):
    """Prepare a PyTorch training loop for any number of processes, precision and accumulation.

    Args:
        device_placement: move prepared models and batches to ``accelerator.device``.
        split_batches: deprecated spelling of ``DataLoaderConfiguration(split_batches=...)``.
        mixed_precision: ``"no"``, ``"fp16"`` (on a GPU; on a CPU it computes in fp32 with a
            warning, as in Accelerate) or ``"bf16"``; default from ``ACCEL_MIXED_PRECISION``,
            else ``"no"``.
        gradient_accumulation_steps: batches per optimizer step (>= 1); default from
            ``ACCEL_GRADIENT_ACCUMULATION_STEPS``, else 1.
        cpu: run on CPU even if an accelerator is present (also ``ACCEL_USE_CPU``).
        dataloader_config: how data loaders are sharded.
        deepspeed_plugin, fsdp_plugin: choose the DeepSpeed or FSDP strategy (accel-backends;
            until it provides them, a NotImplementedError says so). ``deepspeed_plugins`` is
            Accelerate's other spelling (a plugin or a dict of named plugins).
        torch_tp_plugin, megatron_lm_plugin: accepted for Accelerate's signature; tensor
            parallelism and Megatron-LM are out of scope (``OutOfScopeError``).
        rng_types: generators synchronised at each epoch (default ``["generator"]``).
        log_with: experiment trackers (names, ``LoggerType``s or ``GeneralTracker`` objects; "all").
        project_dir, project_config: where checkpoints and local tracker logs go, automatic
            checkpoint naming, ``total_limit``.
        gradient_accumulation_plugin: full accumulation options (instead of the steps count).
        step_scheduler_with_optimizer: advance prepared schedulers only with optimizer steps.
        kwargs_handlers: ``DistributedDataParallelKwargs``, ``GradScalerKwargs``,
            ``InitProcessGroupKwargs``, ``AutocastKwargs``, ``ProfileKwargs``.
        dynamo_backend, dynamo_plugin: compile prepared models with ``torch.compile`` (one of
            the two); fields not given come from ``ACCEL_DYNAMO_*`` (or Accelerate's
            ``ACCELERATE_DYNAMO_*``), see ``TorchDynamoPlugin``.
        parallelism_config: Accelerate's ``ParallelismConfig``: data parallelism, replicated
            (``dp_replicate_size``) and sharded (``dp_shard_size``, FSDP2; HSDP with both), the
            sizes multiplying to the number of processes (see :mod:`accel_core.parallelism`).
        strategy: a strategy name (``"single_device"``, ``"ddp"``, or one installed by
            accel-backends) or a :class:`~accel_core.Strategy`; default from ``ACCEL_STRATEGY``,
            else ``"ddp"`` with several processes and ``"single_device"`` with one.
    """

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool | None = None,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int | None = None,
        cpu: bool = False,
        dataloader_config: DataLoaderConfiguration | None = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        rng_types: list[Any] | None = None,
        log_with: Any = None,
        project_dir: str | os.PathLike[str] | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: Any = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: list[KwargsHandler] | None = None,
        dynamo_backend: Any = None,
        dynamo_plugin: TorchDynamoPlugin | None = None,
        deepspeed_plugins: Any = None,
        parallelism_config: ParallelismConfigLike | None = None,
        *,
        strategy: str | Strategy | None = None,
    ) -> None:
        from accel_core.gradient_state import GradientState
        from accel_ops import LaunchEnvironment

        # Refuse what accel does not run before the process state (and group) is built.
        engine_options.refuse_out_of_scope(megatron_lm_plugin, torch_tp_plugin, mixed_precision)
        plugins = engine_options.strategy_plugins(deepspeed_plugin, deepspeed_plugins, fsdp_plugin)
        environment = LaunchEnvironment.from_environ()
        self.handlers = collect_handlers(kwargs_handlers)
        init_handler = self.handlers.get(InitProcessGroupKwargs)
        self.state = AcceleratorState(
            mixed_precision=mixed_precision,
            cpu=cpu,
            dynamo_plugin=settings.dynamo_plugin(dynamo_backend, dynamo_plugin),
            deepspeed_plugin=plugins["deepspeed"],
            fsdp_plugin=plugins["fsdp"],
            parallelism_config=parallelism_config,
            _from_accelerator=True,
            **(init_handler.to_kwargs() if init_handler is not None else {}),
        )
        check_sizes(parallelism_config, self.state.num_processes)
        self.strategy = resolve_strategy(
            strategy,
            launch_strategy=environment.strategy,
            launch_options=environment.strategy_config,
            world_size=self.state.num_processes,
            kwargs_handlers=list(self.handlers.values()),
            plugins=plugins,
            sharded=wants_sharding(parallelism_config),
        )
        check_strategy(parallelism_config, self.strategy)
        self.strategy.setup_environment(self.state)
        self.state._set_strategy(self.strategy)
        if self.state.device_mesh is None:
            self.state.device_mesh = setup_device_mesh(
                parallelism_config, self.device.type, self.num_processes, self.multi_device
            )
        self.precision: Precision = self.strategy.setup_precision(
            self.state.mixed_precision,
            autocast_handler=self.handlers.get(AutocastKwargs),
            scaler_handler=self.handlers.get(GradScalerKwargs),
        )
        self.scaler = self.precision.scaler
        # The strategy answers for accumulation before the process-wide state exists.
        self.gradient_state = GradientState(
            self.strategy.configure_accumulation(
                settings.accumulation_plugin(
                    gradient_accumulation_steps, gradient_accumulation_plugin, environment
                )
            )
        )
        self.gradient_state._follow_strategy(self.strategy.reduces_gradients_in_step)
        self.dataloader_config = settings.dataloader_config(dataloader_config, split_batches)
        self.device_placement = device_placement
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.rng_types = rng_types if rng_types is not None else ["generator"]
        self.project_configuration = project_config or ProjectConfiguration()
        if project_dir is not None:
            self.project_configuration.set_directories(project_dir)
        self._setup_tracking(log_with)
        self._setup_checkpointing()
        self.step = 0
        self.flag_tensor = None
        self.has_lomo_optimizer = False
        self._models: list[Any] = []
        self._optimizers: list[Any] = []
        self._schedulers: list[Any] = []
        self._dataloaders: list[Any] = []
        self._original_loaders: weakref.WeakSet[Any] = weakref.WeakSet()

    # -- configuration read back ---------------------------------------------------------------

    @property
    def mixed_precision(self) -> str:
        """``"no"``, ``"fp16"`` or ``"bf16"``."""
        return self.precision.mode

    @property
    def native_amp(self) -> bool:
        """Whether forward passes of prepared models run under autocast."""
        return self.precision.native_amp

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
        return any(opt.step_was_skipped for opt in self._optimizers)

    # -- prepare -------------------------------------------------------------------------------

    def prepare(self, *args: Any, device_placement: list[bool | None] | None = None) -> Any:
        """Prepare models, optimizers, data loaders and schedulers, given in any order.

        Returns the prepared objects in the order given (one object alone is returned as is).
        """
        placement = device_placement if device_placement is not None else [None] * len(args)
        result = preparation.prepare_all(self, args, placement)
        return result[0] if len(result) == 1 else tuple(result)

    def prepare_model(
        self,
        model: torch.nn.Module,
        device_placement: bool | None = None,
        evaluation_mode: bool = False,
    ) -> torch.nn.Module:
        """Move ``model`` to the device, run its forward in mixed precision, set it up through
        the strategy (not in ``evaluation_mode``) and compile it when a dynamo backend is set.

        A model ``prepare`` returned already comes back as is, listed once among the prepared
        models (it is marked ``_is_accelerate_prepared``, Accelerate's attribute).
        """
        if not evaluation_mode or getattr(model, "_is_accelerate_prepared", False):
            return preparation.prepare_all(self, [model], [device_placement])[0]
        placement = self.device_placement if device_placement is None else device_placement
        if len(preparation.dispatched_devices(model)) > 1:
            placement = False
        self.precision.wrap_forward(model)
        prepared = model.to(self.device) if placement else model
        prepared = preparation.compile_model(prepared, self.state.dynamo_plugin)
        prepared._is_accelerate_prepared = True
        self._models.append(prepared)
        return prepared

    def prepare_optimizer(
        self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None
    ) -> torch.optim.Optimizer:
        """Set ``optimizer`` up through the strategy: it skips steps while accumulating and steps
        through the scaler (an optimizer ``prepare`` returned comes back as is)."""
        return preparation.prepare_all(self, [optimizer], [device_placement])[0]

    def prepare_data_loader(
        self,
        data_loader: torch.utils.data.DataLoader,
        device_placement: bool | None = None,
        slice_fn_for_dispatch: Any = None,
    ) -> torch.utils.data.DataLoader:
        """Shard ``data_loader`` between the processes (see ``DataLoaderConfiguration``)."""
        return preparation.prepare_all(
            self, [data_loader], [device_placement], slice_fn_for_dispatch=slice_fn_for_dispatch
        )[0]

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wrap ``scheduler`` so it follows the prepared optimizer it schedules."""
        return preparation.prepare_all(self, [scheduler], [None])[0]

    @contextlib.contextmanager
    def init_module(self, empty_init: bool | None = None) -> Iterator[None]:
        """Create models the way the strategy wants them: ``with accelerator.init_module():
        model = Net()``. A strategy with sharded init (DeepSpeed ZeRO-3's ``zero.Init``, FSDP's
        meta-device init) runs its ``module_init_context``; any other creates parameters on
        ``accelerator.device``, or on the meta device with ``empty_init=True`` (weights to be
        loaded). Accelerate has no such method (its zero3 init is ``DeepSpeedPlugin.
        zero3_init_context_manager``); this is Lightning Fabric's ``init_module``."""
        if isinstance(self.strategy, SupportsShardedInit):
            with self.strategy.module_init_context(empty_init):
                yield
            return
        with torch.device("meta" if empty_init else self.device):
            yield

    # -- the training step ---------------------------------------------------------------------

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backpropagate ``loss``: divided by the accumulation steps, scaled for fp16.

        With a LOMO optimizer prepared and ``learning_rate=`` given (and no fp16 scaler), the
        optimizer's fused backward-and-update runs instead, as in Accelerate.
        """
        steps = self.gradient_state.num_steps
        if steps > 1 and not self.strategy.handles_accumulation:
            loss = loss / steps
        learning_rate = kwargs.get("learning_rate")
        if learning_rate is not None and self.has_lomo_optimizer and self.scaler is None:
            self.lomo_backward(loss, learning_rate)
            return
        # Under DDP the gradients are all-reduced inside backward: the hang report shows it.
        # The strategy scales the loss (through its precision; an engine scales it itself).
        with inflight.waiting_in("backward", loss):
            self.strategy.backward(loss, **kwargs)

    def accumulate(self, *models: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Context for one batch of gradient accumulation (see :mod:`accel_core.accumulation`)."""
        return accumulation.accumulate(self, models)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Context in which backward passes do not synchronise ``model``'s gradients."""
        return accumulation.no_sync(self, model)

    def lomo_backward(self, loss: torch.Tensor, learning_rate: float) -> None:
        """Backward and update in one pass on the prepared LOMO optimizers (``lomo-optim``'s
        ``Lomo`` / ``AdaLomo``: optimizers with a ``fused_backward(loss, lr)``)."""
        lomo_backward(self._optimizers, loss, learning_rate)

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Divide fp16 gradients by the loss scale (before clipping or inspecting them)."""
        if self.scaler is None:
            return
        optimizers = self._optimizers if optimizer is None else optimizer
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
        module, optimizer = preparation.owners_of(self, parameters)
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

    # -- collectives ---------------------------------------------------------------------------

    def gather(self, tensor: Any) -> Any:
        """Concatenate ``tensor`` (or a nested structure of them) from every process."""
        return collectives_of(self.strategy).gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather evaluation results from every process, dropping the samples the sharded loader
        duplicated to even out its last batch. Non-tensor data goes through ``gather_object``."""
        return metrics.gather_for_metrics(self, input_data, use_gather_object)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Reduce ``tensor`` across processes (``"sum"``, ``"mean"``), every process gets it."""
        return collectives_of(self.strategy).reduce(tensor, reduction=reduction, scale=scale)

    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
    ) -> Any:
        """Pad ``tensor`` along ``dim`` to the largest size among processes."""
        from accel_ops import pad_across_processes

        return pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    # -- models and memory ---------------------------------------------------------------------

    def unwrap_model(
        self,
        model: torch.nn.Module,
        keep_fp32_wrapper: bool = True,
        keep_torch_compile: bool = True,
    ) -> torch.nn.Module:
        """The model inside the wrappers ``prepare`` added."""
        return self.strategy.unwrap_model(model, keep_fp32_wrapper, keep_torch_compile)

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, Any]:
        """The model's state dict as the strategy gathers it (call on every process)."""
        if not unwrap:
            return model.state_dict()
        return self.strategy.model_state_dict(model)

    def save(self, obj: Any, f: str | os.PathLike[str], safe_serialization: bool = False) -> None:
        """Write ``obj`` to ``f`` once (per node with ``save_on_each_node``), atomically."""
        from accel_core.serialization import save

        save(obj, f, self.project_configuration.save_on_each_node, safe_serialization)

    def load(self, f: str | os.PathLike[str], map_location: Any = None, **kwargs: Any) -> Any:
        """Read what :meth:`save` wrote (``torch.load`` with ``weights_only=True`` by default)."""
        from accel_core.serialization import load

        return load(f, map_location=map_location, **kwargs)

    def save_model(
        self,
        model: torch.nn.Module,
        save_directory: str | os.PathLike[str],
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> None:
        """Save ``model``'s weights into ``save_directory`` in shards of at most
        ``max_shard_size`` with an index file (safetensors by default). Call it on every
        process; the main process writes."""
        from accel_core.model_saving import save_model

        save_model(self, model, save_directory, max_shard_size, safe_serialization)

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget every prepared object and release memory; returns ``objects`` as ``None``s."""
        from accel_core.memory import release_memory

        self._background_saver.release()
        self._models, self._optimizers, self._schedulers, self._dataloaders = [], [], [], []
        self.step = 0
        return release_memory(*objects)

    def clear(self, *objects: Any) -> list[Any]:
        """Alias of :meth:`free_memory`."""
        return self.free_memory(*objects)

    def verify_device_map(self, model: torch.nn.Module) -> bool:
        """Whether ``model`` was dispatched across several devices by accel-bigmodel."""
        return len(preparation.dispatched_devices(model)) > 1

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """A loader that starts after ``num_batches`` batches (to resume mid-epoch)."""
        from accel_core.data_loader import skip_first_batches

        return skip_first_batches(dataloader, num_batches=num_batches)

    @contextlib.contextmanager
    def join_uneven_inputs(
        self, joinables: list[Any], even_batches: bool | None = None
    ) -> Iterator[None]:
        """Train on loaders of different lengths per process (torch's ``Join``).

        ``even_batches`` overrides the prepared loaders' setting inside the block.
        """
        if not (self.use_distributed and isinstance(self.strategy, SupportsJoin)):
            warnings.warn(
                f"join_uneven_inputs has no effect with strategy {self.strategy.name!r} on "
                f"{self.num_processes} process(es); the block runs as is.",
                stacklevel=3,
            )
            yield
            return
        saved = []
        if even_batches is not None:
            for loader in self._dataloaders:
                sampler = getattr(loader, "batch_sampler", None)
                if hasattr(sampler, "even_batches"):
                    saved.append((sampler, sampler.even_batches))
                    sampler.even_batches = even_batches
        try:
            with self.strategy.join(joinables):
                yield
        finally:
            for sampler, value in saved:
                sampler.even_batches = value

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
        """Profile the block with torch.profiler (``ProfileKwargs`` configures it)."""
        handler = profile_handler or self.handlers.get(ProfileKwargs)
        with profiling.profile(handler, self.process_index) as profiler:  # type: ignore[arg-type]
            yield profiler
        self.wait_for_everyone()

    def end_training(self) -> None:
        """Finish the run: wait for an asynchronous save, finish the trackers, wait for every
        process, then let the strategy release what it holds."""
        self._background_saver.release()
        self._finish_tracking()
        self.wait_for_everyone()
        self.strategy.teardown()

    def __deepcopy__(self, memo: dict[int, Any]) -> Accelerator:
        """The Accelerator itself, as in Accelerate: it holds the process-wide training state,
        which a copy would split (objects that keep an Accelerator can be deep-copied)."""
        return self

    def __getstate__(self) -> dict[str, Any]:
        """What ``pickle`` keeps, as in Accelerate (transformers' ``TrainingArguments`` and
        ``torch.save`` of objects that hold an Accelerator): the weak set of the data loaders
        given to ``prepare`` is kept as a list and rebuilt when unpickled."""
        state = dict(self.__dict__)
        state["_original_loaders"] = list(self._original_loaders)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._original_loaders = weakref.WeakSet(state["_original_loaders"])

    def __repr__(self) -> str:
        return (
            f"Accelerator(strategy={self.strategy.name!r}, num_processes={self.num_processes}, "
            f"device={self.device}, mixed_precision={self.mixed_precision!r}, "
            f"gradient_accumulation_steps={self.gradient_accumulation_steps})"
        )
