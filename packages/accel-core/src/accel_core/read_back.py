"""Read-only views of an ``Accelerator``'s configuration, under Hugging Face Accelerate's names.

Data loading (``split_batches``, ``even_batches``...), the project folders, the engine plugin, the
kwargs handlers, and the prepared objects under Accelerate's attribute names (``_models``,
``_optimizers``, ``_schedulers``, ``_dataloaders``, ``_custom_objects``: the lists of the
Accelerator's :class:`~accel_core.prepared_objects.PreparedObjects`).

Accelerate keeps each handler given to ``Accelerator(kwargs_handlers=[...])``
in an attribute of its own (``ddp_handler``, ``scaler_handler``...), ``None`` when that kind was
not given; ported code reads them (``accelerator.ddp_handler.find_unused_parameters``). Here they
read ``accelerator.handlers``, the one index of the handlers, so they cannot disagree with what
the strategy and the precision use. They are read-only: the wrapped objects are built from the
handlers when the Accelerator is, so assigning one later could change nothing.

The FP8 attributes exist with the values they have when FP8 is off, which it always is in accel:
``Accelerator`` refuses FP8 recipes and ``mixed_precision="fp8"``
(:class:`~accel_core.out_of_scope.OutOfScopeError`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from accel_core.configuration import DataLoaderConfiguration, ProjectConfiguration
from accel_core.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    ProfileKwargs,
)

if TYPE_CHECKING:
    from accel_core.fp8_recipes import FP8BackendType
    from accel_core.prepared_objects import PreparedObjects, Stateful
    from accel_core.state import AcceleratorState


class ReadBackMixin:
    """The configuration read-back members of ``Accelerator`` (for a class with ``state``,
    ``dataloader_config``, ``project_configuration``, ``handlers`` and ``_prepared``)."""

    state: AcceleratorState
    dataloader_config: DataLoaderConfiguration
    project_configuration: ProjectConfiguration
    handlers: dict[type, KwargsHandler]
    _prepared: PreparedObjects

    @property
    def split_batches(self) -> bool:
        """Whether each batch is split between the processes."""
        return self.dataloader_config.split_batches

    @property
    def dispatch_batches(self) -> bool | None:
        """Whether the main process reads the batches and dispatches them."""
        return self.dataloader_config.dispatch_batches

    @property
    def even_batches(self) -> bool:
        """Whether the last global batch is completed so every process gets one (assignable)."""
        return self.dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.dataloader_config.even_batches = value

    @property
    def use_seedable_sampler(self) -> bool:
        """Whether shuffling samplers are replaced by one seeded alike on every process."""
        return self.dataloader_config.use_seedable_sampler

    @property
    def non_blocking(self) -> bool:
        """Whether batches are copied to the device with ``non_blocking=True``."""
        return self.dataloader_config.non_blocking

    @property
    def use_stateful_dataloader(self) -> bool:
        """Whether prepared loaders are torchdata ``StatefulDataLoader`` s."""
        return self.dataloader_config.use_stateful_dataloader

    @property
    def project_dir(self) -> str | None:
        """The folder of the run."""
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        """The folder of local trackers' logs."""
        return self.project_configuration.logging_dir

    @property
    def deepspeed_plugin(self) -> Any:
        """The active DeepSpeed plugin under the DeepSpeed strategy, else None."""
        return self.state.deepspeed_plugin

    @property
    def ddp_handler(self) -> DistributedDataParallelKwargs | None:
        """The ``DistributedDataParallelKwargs`` given, else None."""
        return self.handlers.get(DistributedDataParallelKwargs)  # type: ignore[return-value]

    @property
    def scaler_handler(self) -> GradScalerKwargs | None:
        """The ``GradScalerKwargs`` given, else None."""
        return self.handlers.get(GradScalerKwargs)  # type: ignore[return-value]

    @property
    def init_handler(self) -> InitProcessGroupKwargs | None:
        """The ``InitProcessGroupKwargs`` given, else None."""
        return self.handlers.get(InitProcessGroupKwargs)  # type: ignore[return-value]

    @property
    def autocast_handler(self) -> AutocastKwargs | None:
        """The ``AutocastKwargs`` given, else None."""
        return self.handlers.get(AutocastKwargs)  # type: ignore[return-value]

    @property
    def profile_handler(self) -> ProfileKwargs | None:
        """The ``ProfileKwargs`` given, else None."""
        return self.handlers.get(ProfileKwargs)  # type: ignore[return-value]

    # -- Accelerate's names for the prepared objects (libraries built on it read them) -------

    @property
    def _models(self) -> list[torch.nn.Module]:
        return self._prepared.models

    @property
    def _optimizers(self) -> list[Any]:
        return self._prepared.optimizers

    @property
    def _schedulers(self) -> list[Any]:
        return self._prepared.schedulers

    @property
    def _dataloaders(self) -> list[DataLoader[Any]]:
        return self._prepared.dataloaders

    @property
    def _custom_objects(self) -> list[Stateful]:
        return self._prepared.custom_objects

    @property
    def _original_loaders(self) -> weakref.WeakSet[DataLoader[Any]]:
        return self._prepared.original_loaders

    @property
    def has_lomo_optimizer(self) -> bool:
        """Whether a LOMO optimizer (``Lomo``, ``AdaLomo``) was prepared."""
        return self._prepared.has_lomo_optimizer

    # FP8 is out of scope: no recipe can be given, so these keep their "FP8 off" values.
    fp8_recipe_handler: None = None
    ao_recipe_handler: None = None
    te_recipe_handler: None = None
    msamp_recipe_handler: None = None
    has_fp8_handler: bool = False
    fp8_enabled: bool = False
    delayed_fp8_autocast: bool = False

    @property
    def fp8_backend(self) -> FP8BackendType:
        """The FP8 engine ``ACCELERATE_FP8_BACKEND`` names (``NO`` when unset), as in Accelerate;
        accel runs none of them."""
        from accel_core.fp8_recipes import FP8BackendType
        from accel_ops import parse_choice_from_env

        return FP8BackendType(parse_choice_from_env("ACCELERATE_FP8_BACKEND", "NO"))
