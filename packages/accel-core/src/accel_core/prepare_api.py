"""The ``prepare`` part of ``Accelerator``'s API: ``prepare``, ``prepare_model``... ``init_module``.

``PrepareMixin`` hands the objects to :func:`accel_core.preparation.prepare_all`, which records
them in the Accelerator's :class:`~accel_core.prepared_objects.PreparedObjects`; the class
declares everything ``prepare_all`` reads from the Accelerator, and it changes none of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from accel_core import preparation
from accel_core.strategies import SupportsShardedInit

if TYPE_CHECKING:
    from accel_core.configuration import DataLoaderConfiguration
    from accel_core.gradient_state import GradientState
    from accel_core.parallelism import ParallelismConfigLike
    from accel_core.precision import Precision
    from accel_core.prepared_objects import PreparedObjects
    from accel_core.scheduler import AcceleratedScheduler
    from accel_core.state import AcceleratorState
    from accel_core.strategies import Strategy


class PrepareMixin:
    """``prepare`` and its one-kind variants, for the ``Accelerator``.

    The names below are what ``prepare`` reads: the Accelerator's fields, and (for the type
    checker only) read-only properties its other mixins define.
    """

    strategy: Strategy
    precision: Precision
    state: AcceleratorState
    gradient_state: GradientState
    dataloader_config: DataLoaderConfiguration
    device_placement: bool
    rng_types: list[Any]
    step_scheduler_with_optimizer: bool
    _prepared: PreparedObjects

    if TYPE_CHECKING:

        @property
        def device(self) -> torch.device: ...

        @property
        def num_processes(self) -> int: ...

        @property
        def parallelism_config(self) -> ParallelismConfigLike | None: ...

        @property
        def split_batches(self) -> bool: ...

    def prepare(self, *args: Any, device_placement: list[bool | None] | None = None) -> Any:
        """Prepare models, optimizers, data loaders and schedulers, given in any order.

        Returns the prepared objects in the order given (one object alone is returned as is).
        """
        placement = device_placement if device_placement is not None else [None] * len(args)
        result = preparation.prepare_all(self, self._prepared, args, placement)
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
            return preparation.prepare_all(self, self._prepared, [model], [device_placement])[0]
        placement = self.device_placement if device_placement is None else device_placement
        if len(preparation.dispatched_devices(model)) > 1:
            placement = False
        self.precision.wrap_forward(model)
        prepared = model.to(self.device) if placement else model
        prepared = preparation.compile_model(prepared, self.state.dynamo_plugin)
        prepared._is_accelerate_prepared = True
        self._prepared.add_model(prepared)
        return prepared

    def prepare_optimizer(
        self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None
    ) -> torch.optim.Optimizer:
        """Set ``optimizer`` up through the strategy: it skips steps while accumulating and steps
        through the scaler (an optimizer ``prepare`` returned comes back as is)."""
        return preparation.prepare_all(self, self._prepared, [optimizer], [device_placement])[0]

    def prepare_data_loader(
        self,
        data_loader: torch.utils.data.DataLoader,
        device_placement: bool | None = None,
        slice_fn_for_dispatch: Any = None,
    ) -> torch.utils.data.DataLoader:
        """Shard ``data_loader`` between the processes (see ``DataLoaderConfiguration``)."""
        return preparation.prepare_all(
            self,
            self._prepared,
            [data_loader],
            [device_placement],
            slice_fn_for_dispatch=slice_fn_for_dispatch,
        )[0]

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wrap ``scheduler`` so it follows the prepared optimizer it schedules."""
        return preparation.prepare_all(self, self._prepared, [scheduler], [None])[0]

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

    def verify_device_map(self, model: torch.nn.Module) -> bool:
        """Whether ``model`` was dispatched across several devices by accel-bigmodel."""
        return len(preparation.dispatched_devices(model)) > 1
