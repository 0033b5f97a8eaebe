"""``Accelerator``: the one object a training script talks to.

It reads the launch environment, chooses a :class:`~accel_core.Strategy` through the resolver,
builds the parts it owns, and then only delegates to them: the prepared objects
(:class:`~accel_core.prepared_objects.PreparedObjects`, filled by :mod:`accel_core.preparation`),
the accumulation counter (:class:`~accel_core.accumulation.Accumulation`, which owns ``step``),
the checkpointer (:class:`~accel_core.checkpointing.checkpointer.Checkpointer`), the trackers
(:class:`~accel_core.tracking.experiment.ExperimentTracking`), the precision
(:mod:`accel_core.precision`), metrics gathering (:mod:`accel_core.metrics`) and process queries
(:mod:`accel_core.process_api`). The mixins group the public methods by part. It never branches
on the kind of distribution: the strategy answers for it.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from accel_core import auto_resume, engine_options, preemption, settings
from accel_core.accumulation import Accumulation
from accel_core.checkpointing.checkpointer import Checkpointer
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
from accel_core.parallelism import (
    ParallelismConfigLike,
    ParallelismMixin,
    check_sizes,
    check_strategy,
    configured_parallelism,
    needed_dimensions,
    setup_device_mesh,
)
from accel_core.precision import Precision
from accel_core.prepare_api import PrepareMixin
from accel_core.prepared_objects import PreparedObjects
from accel_core.process_api import ProcessMixin
from accel_core.read_back import ReadBackMixin
from accel_core.state import AcceleratorState
from accel_core.strategies import (
    Strategy,
    SupportsJoin,
    resolve_strategy,
)
from accel_core.tracking.experiment import ExperimentTracking
from accel_core.tracking.mixin import TrackingMixin
from accel_core.training_step import TrainingStepMixin
from accel_core.triggers import TriggerMixin
from accel_core.unwrap import extract_model_from_parallel


class Accelerator(
    ProcessMixin,
    PrepareMixin,
    TrainingStepMixin,
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
        torch_tp_plugin: Accelerate's deprecated tensor-parallel plugin, read as
            ``ParallelismConfig(tp_size=plugin.tp_size)`` when no ``parallelism_config`` is given.
        megatron_lm_plugin: accepted for Accelerate's signature; Megatron-LM is out of scope
            (``OutOfScopeError``).
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
            (``dp_replicate_size``) and sharded (``dp_shard_size``, FSDP2; HSDP with both), and
            tensor parallelism (``tp_size``, FSDP2), the sizes multiplying to the number of
            processes (see :mod:`accel_core.parallelism`); default: one read from the launch
            (``ACCELERATE_USE_PARALLELISM_CONFIG``).
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
        engine_options.refuse_out_of_scope(megatron_lm_plugin, mixed_precision)
        parallelism_config = configured_parallelism(parallelism_config, torch_tp_plugin)
        plugins = engine_options.strategy_plugins(
            {
                "deepspeed_plugin": deepspeed_plugin,
                "deepspeed_plugins": deepspeed_plugins,
                "fsdp_plugin": fsdp_plugin,
            }
        )
        environment = LaunchEnvironment.from_environ()
        self.handlers = collect_handlers(kwargs_handlers)
        init_handler = self.handlers.get(InitProcessGroupKwargs)
        self.state = AcceleratorState(
            mixed_precision=mixed_precision,
            cpu=cpu,
            dynamo_plugin=settings.dynamo_plugin(dynamo_backend, dynamo_plugin),
            deepspeed_plugin=deepspeed_plugin if deepspeed_plugins is None else deepspeed_plugins,
            fsdp_plugin=fsdp_plugin,
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
            needed=needed_dimensions(parallelism_config),
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
            self.strategy.accumulation.configure(
                settings.accumulation_plugin(
                    gradient_accumulation_steps, gradient_accumulation_plugin, environment
                )
            )
        )
        self.dataloader_config = settings.dataloader_config(dataloader_config, split_batches)
        self.device_placement = device_placement
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.rng_types = rng_types if rng_types is not None else ["generator"]
        project_configuration = project_config or ProjectConfiguration()
        if project_dir is not None:
            project_configuration.set_directories(project_dir)
        # The parts, each owning its fields.
        self._prepared = PreparedObjects()
        self._accumulation = Accumulation(self.gradient_state, self.strategy, self.use_distributed)
        self._tracking = ExperimentTracking(log_with, project_configuration, self.state)
        self._checkpointer = Checkpointer(
            self.strategy,
            self._prepared,
            project_configuration,
            accumulation=self._accumulation,
            state=self.state,
            scaler=self.scaler,
            tracking=self._tracking,
        )
        self.flag_tensor = None
        # After the checkpointer: both save or load through it (accel_core.preemption, .auto_resume)
        preemption.adopt_project_dir(project_configuration)
        self._preemption = preemption.watch(self)
        if self._preemption is None:
            self.gradient_state._set_step_boundary_hook(None)
        self._auto_resume = auto_resume.watch(self)
        if self._auto_resume is None:
            self.gradient_state._set_iteration_hook(None)

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
    def project_configuration(self) -> ProjectConfiguration:
        """Where checkpoints and local tracker logs go, automatic naming, ``total_limit``."""
        return self._checkpointer.project_configuration

    @project_configuration.setter
    def project_configuration(self, value: ProjectConfiguration) -> None:
        self._checkpointer.project_configuration = value
        self._tracking.project_configuration = value

    # -- collectives ---------------------------------------------------------------------------

    def gather(self, tensor: Any) -> Any:
        """Concatenate ``tensor`` (or a nested structure of them) from every process."""
        return collectives_of(self.strategy).gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather evaluation results from every process, dropping the samples the sharded loader
        duplicated to even out its last batch. Non-tensor data goes through ``gather_object``."""
        from accel_core import metrics

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
        return extract_model_from_parallel(model, keep_fp32_wrapper, keep_torch_compile)

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, Any]:
        """The model's state dict as the strategy gathers it (call on every process)."""
        if not unwrap:
            return model.state_dict()
        return self.strategy.checkpoint_io.model_state_dict(model)

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

        self._checkpointer.release()
        self._prepared.forget()
        self._accumulation.step = 0
        return release_memory(*objects)

    def clear(self, *objects: Any) -> list[Any]:
        """Alias of :meth:`free_memory`."""
        return self.free_memory(*objects)

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
            for loader in self._prepared.dataloaders:
                sampler = getattr(loader, "batch_sampler", None)
                if hasattr(sampler, "even_batches"):
                    saved.append((sampler, sampler.even_batches))
                    sampler.even_batches = even_batches
        # the ranks make different numbers of backward passes in the block: no preemption votes
        pause = self._preemption.paused() if self._preemption else contextlib.nullcontext()
        try:
            with pause, self.strategy.join(joinables):
                yield
        finally:
            for sampler, value in saved:
                sampler.even_batches = value

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None) -> Iterator[Any]:
        """Profile the block with torch.profiler (``ProfileKwargs`` configures it)."""
        from accel_core import profiling

        handler = profile_handler or self.handlers.get(ProfileKwargs)
        with profiling.profile(handler, self.process_index) as profiler:  # type: ignore[arg-type]
            yield profiler
        self.wait_for_everyone()

    def end_training(self) -> None:
        """Finish the run: wait for an asynchronous save, finish the trackers, wait for every
        process, then let the strategy release what it holds."""
        self._checkpointer.release()
        self._tracking.finish()
        self.wait_for_everyone()
        self.strategy.teardown()

    def __deepcopy__(self, memo: dict[int, Any]) -> Accelerator:
        """The Accelerator itself, as in Accelerate: it holds the process-wide training state,
        which a copy would split (objects that keep an Accelerator can be deep-copied)."""
        return self

    def __repr__(self) -> str:
        return (
            f"Accelerator(strategy={self.strategy.name!r}, num_processes={self.num_processes}, "
            f"device={self.device}, mixed_precision={self.mixed_precision!r}, "
            f"gradient_accumulation_steps={self.gradient_accumulation_steps})"
        )
