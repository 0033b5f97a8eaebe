"""``AcceleratorState``: the training-loop state shared by every object of one process.

Like Hugging Face Accelerate's, every instance shares one dictionary (the first construction
initialises it; later ones read it), and it sits on top of ``accel_ops.PartialState`` (rank,
world size, device, process group): each of the process state's attributes and methods is read
through a property or method of the same name here.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch

from accel_core.configuration import TorchDynamoPlugin
from accel_core.precision import check_mixed_precision
from accel_ops import DistributedType, PartialState

if TYPE_CHECKING:
    from accel_core.parallelism import ParallelismConfigLike
    from accel_core.strategies import Strategy
    from accel_ops import LaunchEnvironment


class AcceleratorState:
    """Process-wide state of the training loop.

    Attributes:
        mixed_precision: ``"no"``, ``"fp16"`` or ``"bf16"``.
        distributed_type: the strategy's ``accel_ops.DistributedType``.
        strategy: the chosen :class:`~accel_core.Strategy` (``None`` before an Accelerator exists).
        dynamo_plugin: the ``torch.compile`` settings.
        deepspeed_plugins, fsdp_plugin, torch_tp_plugin, megatron_lm_plugin: Accelerate's engine
            plugins as given to the Accelerator (None when not given); ``deepspeed_plugin`` and
            ``is_fsdp2`` read them (``is_fsdp2`` with the strategy's ``compat.flags``).
        parallelism_config, device_mesh: the ``ParallelismConfig`` and torch's ``DeviceMesh``
            built from it (None without one).
        partial: the underlying ``accel_ops.PartialState``; ``num_processes``, ``process_index``,
            ``device``, ``is_main_process``, ``wait_for_everyone``... read through to it.
    """

    _shared_state: dict[str, Any] = {}

    def __init__(
        self,
        mixed_precision: str | None = None,
        cpu: bool = False,
        dynamo_plugin: TorchDynamoPlugin | None = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        parallelism_config: ParallelismConfigLike | None = None,
        _from_accelerator: bool = False,
        **kwargs: Any,
    ) -> None:
        self.__dict__ = self._shared_state
        if self.initialized:
            if not self.partial.initialized:
                # PartialState._reset_state() ran since (third-party test suites call it between
                # tests): join again, as Accelerate does; the kept instance shares the new state
                PartialState(cpu=cpu, **kwargs)
            self._check_unchanged(mixed_precision)
            return

        # PartialState reads the launch environment (ACCEL_USE_CPU included) once for the process
        self.partial: PartialState = PartialState(cpu=cpu, **kwargs)
        environment = self.partial.launch_environment
        chosen = mixed_precision if mixed_precision is not None else environment.mixed_precision
        self._mixed_precision = check_mixed_precision(chosen, self.partial.device)
        self.dynamo_plugin = dynamo_plugin or TorchDynamoPlugin()
        self.strategy: Strategy | None = None
        self.distributed_type: DistributedType = self.partial.distributed_type
        self.use_ipex = False
        # Accelerate's engine plugins, kept as given: the strategy chosen from them uses them.
        self.deepspeed_plugins = deepspeed_plugin
        self.fsdp_plugin = fsdp_plugin
        self.torch_tp_plugin = torch_tp_plugin
        self.megatron_lm_plugin = megatron_lm_plugin
        self.parallelism_config = parallelism_config
        self.device_mesh: Any = None  # torch's DeviceMesh of parallelism_config, when it has one

    def _check_unchanged(self, mixed_precision: str | None) -> None:
        if mixed_precision is None:
            return
        wanted = str(getattr(mixed_precision, "value", mixed_precision)).lower()
        if wanted != self._mixed_precision:
            raise ValueError(
                f"AcceleratorState was already initialised with mixed_precision="
                f"{self._mixed_precision!r} and cannot switch to {wanted!r} in the same process. "
                "Create one Accelerator per process, or call "
                "AcceleratorState._reset_state(reset_partial_state=True) first (tests only)."
            )

    @property
    def initialized(self) -> bool:
        """Whether an ``AcceleratorState`` exists in this process."""
        return "partial" in self._shared_state

    @property
    def mixed_precision(self) -> str:
        """The mixed-precision mode: ``"no"``, ``"fp16"`` or ``"bf16"``."""
        return self._mixed_precision

    @property
    def deepspeed_plugin(self) -> Any:
        """The active DeepSpeed plugin with the DeepSpeed strategy (of a dict of plugins, the one
        whose ``selected`` is true, else the first), else None."""
        plugins = self.deepspeed_plugins
        if plugins is None or not self._strategy_built_from(plugins):
            return None
        if not isinstance(plugins, dict):
            return plugins
        candidates = list(plugins.values())
        return next((p for p in candidates if getattr(p, "selected", False)), candidates[0])

    def select_deepspeed_plugin(self, name: str | None = None) -> None:
        """Make the DeepSpeed plugin called ``name`` the active one (Accelerate's multi-model
        DeepSpeed): the next ``prepare`` builds its engine from that plugin's config. Asks the
        strategy (``select_plugin``); a strategy with no plugins to choose from is an error."""
        select = getattr(self.strategy, "select_plugin", None)
        if select is None:
            chosen = getattr(self.strategy, "name", None)
            raise ValueError(
                f"select_deepspeed_plugin({name!r}): strategy {chosen!r} has no plugins to choose "
                "from; pass Accelerator(deepspeed_plugins={'name': DeepSpeedPlugin(...), ...})."
            )
        select(name)

    def get_deepspeed_plugin(self, name: str) -> Any:
        """The DeepSpeed plugin called ``name`` of those given to the Accelerator."""
        plugins = self.deepspeed_plugins
        if not isinstance(plugins, dict) or name not in plugins:
            known = sorted(plugins) if isinstance(plugins, dict) else "no named plugins"
            raise ValueError(f"no DeepSpeed plugin called {name!r}: the Accelerator has {known}.")
        return plugins[name]

    def _strategy_built_from(self, plugins: object) -> bool:
        """Whether the chosen strategy was created from ``plugins`` (one of them, for a dict)."""
        compat = getattr(self.strategy, "compat", None)
        chosen = compat.plugin if compat is not None else None
        if chosen is None:
            return False
        if isinstance(plugins, dict):
            return any(chosen is plugin for plugin in plugins.values()) or chosen is plugins
        return chosen is plugins

    @property
    def is_fsdp2(self) -> bool:
        """Whether the strategy was created from the FSDP plugin, of ``fsdp_version`` 2: the
        strategy says so (``"is_fsdp2"`` in its ``compat.flags``)."""
        return self._strategy_answers("is_fsdp2")

    def _strategy_answers(self, question: str) -> bool:
        """Whether the chosen strategy has ``question`` among its ``compat.flags`` and was
        created from the plugin this state holds in the strategy's ``plugin_slot``."""
        strategy = self.strategy
        compat = getattr(strategy, "compat", None)
        if compat is None or question not in compat.flags:
            return False
        slot = compat.plugin_slot
        plugin = getattr(self, slot, None) if slot is not None else None
        return plugin is not None and self._strategy_built_from(plugin)

    def destroy_process_group(self, group: Any = None) -> None:
        """Destroy ``group`` (default: the default group), through the process state: works
        after ``_reset_state()`` too, as Accelerate's does."""
        PartialState().destroy_process_group(group)

    @property
    def fork_launched(self) -> bool:
        """Whether the processes were forked by ``notebook_launcher``."""
        return PartialState().fork_launched

    # -- the process state (``accel_ops.PartialState``), read through ------------------------

    @property
    def launch_environment(self) -> LaunchEnvironment:
        """What the launcher set for this process (read once, by the process state)."""
        return self.partial.launch_environment

    @property
    def device(self) -> torch.device:
        """The device of this process."""
        return self.partial.device

    @property
    def default_device(self) -> torch.device:
        """The device of this process (same as ``device``)."""
        return self.partial.default_device

    @property
    def num_processes(self) -> int:
        """The number of processes of the job."""
        return self.partial.num_processes

    @property
    def process_index(self) -> int:
        """The global rank of this process."""
        return self.partial.process_index

    @property
    def local_process_index(self) -> int:
        """The rank of this process on its machine."""
        return self.partial.local_process_index

    @property
    def backend(self) -> str | None:
        """The process group backend (``"gloo"``, ``"nccl"``...), None with one process."""
        return self.partial.backend

    @property
    def timeout(self) -> timedelta:
        """The timeout of the process group and of every collective."""
        return self.partial.timeout

    @property
    def debug(self) -> bool:
        """Whether collectives check shapes and dtypes across ranks first."""
        return self.partial.debug

    @property
    def use_distributed(self) -> bool:
        """Whether more than one process takes part."""
        return self.partial.use_distributed

    @property
    def is_main_process(self) -> bool:
        """Whether this is the process of global rank 0."""
        return self.partial.is_main_process

    @property
    def is_local_main_process(self) -> bool:
        """Whether this is the process of rank 0 on its machine."""
        return self.partial.is_local_main_process

    @property
    def is_last_process(self) -> bool:
        """Whether this is the process of the highest global rank."""
        return self.partial.is_last_process

    def wait_for_everyone(self) -> None:
        """Block until every process reaches this point (no-op on one process)."""
        self.partial.wait_for_everyone()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` once per machine (on the local main process)."""
        self.partial.print(*args, **kwargs)

    def main_process_first(self) -> AbstractContextManager[None]:
        """Run the block on the main process first, then on the others."""
        return self.partial.main_process_first()

    def local_main_process_first(self) -> AbstractContextManager[None]:
        """Run the block on each machine's main process first, then on the others."""
        return self.partial.local_main_process_first()

    def split_between_processes(
        self, inputs: Any, apply_padding: bool = False
    ) -> AbstractContextManager[Any]:
        """Give each process its share of ``inputs`` (a list, tuple, dict of them, or tensor)."""
        return self.partial.split_between_processes(inputs, apply_padding=apply_padding)

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run ``function`` only on the main process."""
        return self.partial.on_main_process(function)

    def on_local_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run ``function`` only on each machine's main process."""
        return self.partial.on_local_main_process(function)

    def on_last_process(self, function: Callable[..., Any] | None = None) -> Any:
        """Decorator: run ``function`` only on the last process."""
        return self.partial.on_last_process(function)

    def on_process(
        self, function: Callable[..., Any] | None = None, process_index: int | None = None
    ) -> Any:
        """Decorator: run ``function`` only on the process of global rank ``process_index``."""
        return self.partial.on_process(function, process_index=process_index)

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Any:
        """Decorator: run ``function`` only on the process of local rank ``local_process_index``."""
        return self.partial.on_local_process(function, local_process_index=local_process_index)

    def _set_strategy(self, strategy: Strategy) -> None:
        """Record the strategy chosen by the Accelerator (after its ``setup_environment``)."""
        self.strategy = strategy
        compat = strategy.compat
        slot = compat.plugin_slot
        if slot is not None and compat.plugin is not None and getattr(self, slot) is None:
            setattr(self, slot, compat.plugin)
        if compat.distributed_type is not None:
            self.distributed_type = compat.distributed_type

    def __getattr__(self, name: str) -> Any:
        # Only called for names the state does not hold (or whose property failed): nothing is
        # forwarded; after ``_reset_state()`` the error says so in Accelerate's words.
        if name.startswith("__"):
            raise AttributeError(name)
        if "partial" not in self._shared_state:
            # also for ``partial`` itself, which every forwarding property reads (the
            # Accelerator's ``num_processes`` reads ``state.partial``)
            raise AttributeError(
                f"`AcceleratorState` object has no attribute `{name}`. This happens if "
                "`AcceleratorState._reset_state()` was called and an `Accelerator` or "
                "`PartialState` was not reinitialized, or before the first Accelerator: create "
                "an Accelerator first."
            )
        raise AttributeError(f"'AcceleratorState' object has no attribute {name!r}")

    def __repr__(self) -> str:
        if not self.initialized:
            return "AcceleratorState(not initialised)"
        return (
            f"{self.partial!r}\nMixed precision type: {self._mixed_precision}\n"
            f"Strategy: {getattr(self.strategy, 'name', None)}\n"
        )

    @staticmethod
    def _reset_state(reset_partial_state: bool = False) -> None:
        """Forget the shared state (tests); ``reset_partial_state`` resets the process state too."""
        AcceleratorState._shared_state.clear()
        if reset_partial_state:
            from accel_ops import PartialState

            PartialState._reset_state()
