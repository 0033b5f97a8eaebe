"""The ``deepspeed`` strategy: one DeepSpeed engine (ZeRO stage 0-3, bf16) per Accelerator.

Selected by ``Accelerator(deepspeed_plugin=DeepSpeedPlugin(...))``, by ``ACCEL_STRATEGY=deepspeed``
(``accel launch --use_deepspeed``; ``ACCEL_STRATEGY_CONFIG`` holds the ``deepspeed_config`` keys,
which the plugin reads itself) or ``Accelerator(strategy=DeepSpeedStrategy(...))``.

The engine owns the model, the optimizer, the loss scaling, gradient accumulation, clipping and
(for DeepSpeed's own schedules) the scheduler, as in Hugging Face Accelerate 1.15:

- ``prepare`` builds the engine from the model, optimizer and scheduler of one call, with the
  config's ``"auto"`` values filled from them (:mod:`accel_backends.deepspeed.engine_setup`). The
  prepared model is the engine; ``Accelerator.unwrap_model`` gives back the user's module.
- ``accelerator.backward(loss)`` (the loss undivided: the engine divides it by its
  ``gradient_accumulation_steps``) tells the engine whether this batch ends an accumulation cycle
  (``accelerator.sync_gradients``, so ``accumulate`` and the engine agree), runs the engine's
  backward and, at the end of a cycle, its step: clipping (``gradient_clipping`` of the config),
  optimizer step, zeroing, the engine's scheduler. ``optimizer.step()``, ``zero_grad()`` and the
  engine scheduler's ``step()`` are then no-ops; a torch scheduler steps as usual.
- ``clip_grad_norm_`` returns the engine's norm of its last step (it clips nothing itself: the
  config's ``gradient_clipping`` does); ``clip_grad_value_`` is an error, as in Accelerate.
- ``save_state``/``load_state`` go through DeepSpeed's own checkpoints
  (:mod:`accel_backends.deepspeed.checkpoint`), under Accelerate's names; with ``async_save``,
  DeepSpeed's save runs in the call and its files are written in the background
  (:mod:`accel_backends.deepspeed.async_capture`).
- ``get_state_dict``/``save_model``: the full state dict (ZeRO-3: gathered to process 0 when
  ``zero3_save_16bit_model`` is on, else an error saying how).

- Several plugins (``Accelerator(deepspeed_plugins={"a": p1, "b": p2})``): the first is active,
  :meth:`DeepSpeedStrategy.select_plugin` (``AcceleratorState.select_deepspeed_plugin``) switches,
  and each ``prepare`` builds its engine from the plugin active then (one model per call).
- ``Accelerator.init_module()`` under ZeRO-3 with ``zero3_init_flag``: ``deepspeed.zero.Init``
  (:mod:`accel_backends.deepspeed.zero_init`).
- CPU offload of the optimizer (DeepSpeed's CPU Adam replaces a torch Adam/AdamW; compiled on
  first use) and, under ZeRO-3, of the parameters.

Not built yet: NVMe offload, DeepSpeed's tensor and sequence parallelism.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from accel_backends.deepspeed.accumulation import DeepSpeedAccumulation, reconcile_accumulation
from accel_backends.deepspeed.checkpoint_io import DeepSpeedCheckpointIO
from accel_backends.deepspeed.choice import named_plugins, plugin_from_options
from accel_backends.deepspeed.engine_setup import (
    EngineRequest,
    build_engine,
    per_process_batch_size,
)
from accel_backends.deepspeed.plugin import DeepSpeedPlugin
from accel_backends.deepspeed.precision import DeepSpeedPrecision, configured_mode
from accel_backends.deepspeed.sources import DeepSpeedConfigConflict, Disagreement, Sourced
from accel_backends.deepspeed.wrappers import (
    DeepSpeedEngineWrapper,
    DeepSpeedOptimizerWrapper,
    DeepSpeedSchedulerWrapper,
)
from accel_backends.deepspeed.zero_init import zero3_init_enabled, zero_init_context
from accel_backends.errors import require_engine
from accel_backends.one_process_group import destroy_own_group, form_one_process_group
from accel_core.strategies import SetupResult, Strategy
from accel_core.strategies.compat import AccelerateCompat
from accel_ops import DistributedType

if TYPE_CHECKING:
    from accel_core.kwargs_handlers import AutocastKwargs, GradScalerKwargs, KwargsHandler
    from accel_core.precision import Precision
    from accel_core.state import AcceleratorState

logger = logging.getLogger(__name__)


class DeepSpeedStrategy(Strategy):
    """Run the training loop through a DeepSpeed engine, as a :class:`DeepSpeedPlugin` says.

    Args:
        kwargs_handlers: the Accelerator's handlers (none concerns DeepSpeed).
        plugin: the plugin to follow, or a dict of named plugins (Accelerate's
            ``deepspeed_plugins``; the first is active, :meth:`select_plugin` switches); built
            from ``options`` and the launch environment when not given.
        **options: fields of ``DeepSpeedPlugin``, or the ``deepspeed_config`` keys that ``accel
            launch`` passed in ``ACCEL_STRATEGY_CONFIG`` (the plugin reads those itself).

    Raises:
        TypeError: for an option that is neither, or a plugin of another type.
        DeepSpeedConfigConflict: (from the plugin) for a setting given twice with different values.
    """

    name = "deepspeed"

    def __init__(
        self,
        kwargs_handlers: Sequence[KwargsHandler] = (),
        plugin: DeepSpeedPlugin | Mapping[str, DeepSpeedPlugin] | None = None,
        **options: Any,
    ) -> None:
        self.kwargs_handlers = tuple(kwargs_handlers)
        if plugin is None:
            plugin = plugin_from_options(options)
        elif options:
            raise TypeError(
                f"strategy 'deepspeed' got a plugin and options {sorted(options)}; set them on "
                "the plugin"
            )
        #: The active plugin: the next engine is built from its config.
        self.plugin: DeepSpeedPlugin
        self.plugin, self.plugins = named_plugins(plugin)
        self.compat = AccelerateCompat(plugin=self.plugin, plugin_slot="deepspeed_plugins")
        self.accumulation = DeepSpeedAccumulation(self)
        self.checkpoint_io = DeepSpeedCheckpointIO(self)
        self.device = torch.device("cpu")
        self._engines: list[torch.nn.Module] = []
        self._trained_plugin: DeepSpeedPlugin | None = None  # of the engine backward runs
        self._wrapper: DeepSpeedEngineWrapper | None = None
        self._batch_sizes: list[int | None] = []
        self._split_batches = False
        self._num_processes = 1
        self._rank = 0
        self._own_group = False
        self._warned_max_norm = False

    # -- environment, precision, accumulation -------------------------------------------------

    def setup_environment(self, state: AcceleratorState) -> None:
        """Check that DeepSpeed is installed, take the device, and give a one-process run its own
        process group (DeepSpeed always needs one). The (first) plugin becomes the active one
        (the state shows it in ``deepspeed_plugins`` when the Accelerator was given none:
        ``plugin_slot``)."""
        require_engine("deepspeed", "the deepspeed strategy")
        if not torch.distributed.is_initialized():
            if state.num_processes > 1:
                raise RuntimeError(
                    "strategy 'deepspeed' found no process group for a job of "
                    f"{state.num_processes} processes; start it with `accel launch` or `torchrun`."
                )
            form_one_process_group(state.device)
            self._own_group = True
        self.device = state.device
        self._num_processes = state.num_processes
        self._rank = state.process_index
        self.compat.distributed_type = DistributedType.DEEPSPEED
        self.select_plugin(None)

    def select_plugin(self, name: str | None) -> DeepSpeedPlugin:
        """Make the plugin called ``name`` the active one (``None``: the current one), as
        Accelerate's ``AcceleratorState.select_deepspeed_plugin``: the next ``prepare`` builds
        its engine from that plugin's config, and ``Accelerator.init_module`` follows its
        ``zero3_init_flag``. Engines already built keep their own config.

        Raises ``ValueError`` for a name not among the plugins (or any name with one plugin).
        """
        if name is not None:
            if self.plugins is None or name not in self.plugins:
                known = "one plugin, not named" if self.plugins is None else sorted(self.plugins)
                raise ValueError(
                    f"no DeepSpeed plugin called {name!r}: the Accelerator was given {known}; "
                    "name plugins with Accelerator(deepspeed_plugins={'name': plugin, ...})."
                )
            self.plugin = self.plugins[name]
            self.compat.plugin = self.plugin
        for other in (self.plugins or {}).values():
            if other is not self.plugin:
                other._unselect()
        self.plugin.select(_from_accelerator_state=True)
        return self.plugin

    @property
    def root_device(self) -> torch.device:
        """The process state's device (the engine moves the model there)."""
        return self.device

    def setup_precision(
        self,
        mode: str,
        *,
        autocast_handler: AutocastKwargs | None = None,
        scaler_handler: GradScalerKwargs | None = None,
    ) -> Precision:
        """Turn the config's fp16/bf16 section on for ``mode``; the precision reported is what the
        config then enables (as in Accelerate, the DeepSpeed config decides)."""
        for plugin in self._all_plugins():
            plugin.set_mixed_precision(mode)
        config = self.plugin.deepspeed_config
        self._precision = DeepSpeedPrecision(configured_mode(config), self.root_device)
        return self._precision

    def _all_plugins(self) -> list[DeepSpeedPlugin]:
        return [self.plugin] if self.plugins is None else list(self.plugins.values())

    # -- building models partitioned (zero.Init) -----------------------------------------------

    def module_init_context(
        self, empty_init: bool | None = None
    ) -> contextlib.AbstractContextManager[object]:
        """``deepspeed.zero.Init`` when the active plugin is ZeRO-3 with ``zero3_init_flag`` (its
        default under ZeRO-3): each module is partitioned between the processes as it is built
        (``empty_init`` changes nothing then: nothing is materialised whole). Otherwise modules
        are created on the device, or on the meta device with ``empty_init=True``."""
        if zero3_init_enabled(self.plugin):
            return zero_init_context(self.plugin, self.device)
        return torch.device("meta" if empty_init else self.device)

    # -- setup ---------------------------------------------------------------------------------

    def setup(
        self,
        models: Sequence[torch.nn.Module],
        optimizers: Sequence[torch.optim.Optimizer],
        schedulers: Sequence[object],
        dataloaders: Sequence[DataLoader[Any]],
        *,
        model_placement: Sequence[bool] | None = None,
        optimizer_placement: Sequence[bool] | None = None,
    ) -> SetupResult:
        """Build the engine from the model, optimizer and scheduler of this call (the data loaders
        of this and earlier calls give the micro-batch size); loaders come back unchanged."""
        from accel_core.gradient_state import GradientState

        if len(models) > 1 or (models and self._engines and self.plugins is None):
            raise ValueError(
                "You can't use same `Accelerator()` instance with multiple models when using "
                "DeepSpeed: create one Accelerator per model, or give it one plugin per model "
                "(Accelerator(deepspeed_plugins={'name': plugin, ...})) and prepare each model "
                "in its own prepare() call after accelerator.state.select_deepspeed_plugin(name)."
            )
        if len(optimizers) > 1 or len(schedulers) > 1:
            raise ValueError(
                "the deepspeed strategy builds one engine from one model, one optimizer and one "
                f"scheduler; this prepare() call holds {len(optimizers)} optimizers and "
                f"{len(schedulers)} schedulers."
            )
        for loader in dataloaders:
            self._batch_sizes.append(per_process_batch_size(loader, self._num_processes))
            for holder in (getattr(loader, "batch_sampler", None), loader.dataset):
                self._split_batches |= bool(getattr(holder, "split_batches", False))
        result = SetupResult(dataloaders=list(dataloaders))
        if not models:
            if optimizers or schedulers:
                raise ValueError(
                    "under DeepSpeed, prepare the optimizer and scheduler in the same prepare() "
                    "call as their model: the engine is built from all of them together."
                )
            return result
        request = EngineRequest(
            model=models[0],
            optimizer=optimizers[0] if optimizers else None,
            scheduler=schedulers[0] if schedulers else None,
            batch_sizes=self._batch_sizes,
            split_batches=self._split_batches,
            num_processes=self._num_processes,
            accumulation_steps=GradientState().num_steps,
        )
        if self.plugin.is_auto("gradient_accumulation_steps"):  # a plugin selected after setup
            reconcile_accumulation(self.plugin, request.accumulation_steps)
        configured = self.plugin.get_value("gradient_accumulation_steps")
        if configured != request.accumulation_steps:
            engine = Sourced(configured, "the DeepSpeed config of the engine")
            changed = Sourced(request.accumulation_steps, "accelerator.gradient_accumulation_steps")
            raise DeepSpeedConfigConflict(
                [Disagreement("gradient_accumulation_steps", engine, changed)]
            )
        built = build_engine(self.plugin, request, self.device)
        self._engines.append(built.engine)
        if self._wrapper is None or (optimizers and self._trained_plugin is None):
            # backward runs through the first engine prepared with an optimizer (else the first)
            self._wrapper = DeepSpeedEngineWrapper(built.engine)
            self._trained_plugin = self.plugin if optimizers else None
        elif optimizers:
            logger.warning(
                "a second DeepSpeed engine with an optimizer: accelerator.backward() keeps "
                "running through the first one; use one Accelerator per trained model."
            )
        result.models = [built.engine]
        if optimizers and built.optimizer is not None:
            result.optimizers = [DeepSpeedOptimizerWrapper(built.optimizer)]
        if schedulers:
            engine_scheduler = built.scheduler
            result.schedulers = [
                DeepSpeedSchedulerWrapper(engine_scheduler, result.optimizers)  # type: ignore[arg-type]
                if engine_scheduler is not None
                else schedulers[0]  # a torch scheduler: the Accelerator wraps it
            ]
        return result

    def setup_module(self, module: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        """The engine of ``module`` alone (``setup`` with nothing else)."""
        return self.setup([module], [], [], []).models[0]

    # -- the training step ---------------------------------------------------------------------

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """The engine's backward, then at the end of an accumulation cycle its step (see the
        module docstring)."""
        from accel_core.gradient_state import GradientState

        if self._wrapper is None:
            raise RuntimeError(
                "accelerator.backward under DeepSpeed needs the model prepared first "
                "(accelerator.prepare(model, optimizer, dataloader))."
            )
        self._wrapper.backward(loss, sync_gradients=GradientState().sync_gradients, **kwargs)

    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        closure: Callable[[], Any] | None = None,
    ) -> Any:
        """Nothing: the engine stepped in ``backward`` (the prepared optimizer's ``step`` is a
        no-op and does not call this)."""
        return None

    def clip_gradients_norm(
        self,
        module: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        parameters: Iterable[torch.nn.Parameter] | None = None,
    ) -> torch.Tensor:
        """The engine's gradient norm of its last step (NaN before the first one; Accelerate
        returns None there). The engine clipped at the config's ``gradient_clipping`` already;
        a different ``max_norm`` is ignored, with a warning the first time."""
        configured = (self._trained_plugin or self.plugin).get_value("gradient_clipping", 0.0)
        if not self._warned_max_norm and configured != max_norm:
            self._warned_max_norm = True
            clips = f"clips at {configured}" if configured else "does not clip"
            warnings.warn(
                f"clip_grad_norm_(max_norm={max_norm}) under DeepSpeed: max_norm is ignored, the "
                f"engine {clips} (gradient_clipping of its config); set gradient_clipping in the "
                "DeepSpeedPlugin or the DeepSpeed config instead.",
                stacklevel=3,
            )
        norm = self._wrapper.get_global_grad_norm() if self._wrapper is not None else None
        return torch.tensor(float("nan") if norm is None else float(norm))

    def clip_gradients_value(
        self, parameters: Iterable[torch.nn.Parameter], clip_value: float
    ) -> None:
        """Always an error, as in Accelerate: DeepSpeed clips the norm only."""
        raise RuntimeError(
            "DeepSpeed does not support `clip_grad_value_`. Use `clip_grad_norm_` instead (the "
            "engine clips at the config's gradient_clipping)."
        )

    def describe(self) -> str:
        """The DeepSpeed config with the source of every value (``DeepSpeedPlugin.describe``)."""
        return self.plugin.describe()

    def teardown(self) -> None:
        """Release the one-process group this strategy created (none otherwise)."""
        destroy_own_group(self._own_group)
        self._own_group = False

    def _engine_of(self, model: torch.nn.Module) -> Any:
        for engine in self._engines:
            if model is engine or model is getattr(engine, "module", None):
                return engine
        raise ValueError(
            "this model was not prepared by this Accelerator's deepspeed strategy; pass the model "
            "accelerator.prepare() returned."
        )
