"""``PreparedObjects``: what an ``Accelerator`` prepared, and what it checkpoints.

One registry per Accelerator. ``prepare`` records the models, optimizers, schedulers and data
loaders it returns (and the original loaders it was given, to refuse preparing one twice);
``register_for_checkpointing`` adds the custom objects. The checkpointer reads the lists to save
and restore them; ``free_memory`` forgets the prepared objects. The ``Accelerator`` shows the
lists under Accelerate's private names (``accelerator._models``, ``_optimizers``...), which
libraries built on Accelerate read.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch.utils.data import DataLoader


class Stateful(Protocol):
    """Anything ``register_for_checkpointing`` accepts: torch's ``Stateful`` (two methods)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class PreparedObjects:
    """The prepared objects of one ``Accelerator``, in the order they were prepared.

    Attributes:
        models, optimizers, schedulers, dataloaders: what ``prepare`` returned, by kind.
        custom_objects: the objects given to ``register_for_checkpointing``, in that order.
        original_loaders: the data loaders given to ``prepare`` (weakly held).
        has_lomo_optimizer: whether a LOMO optimizer (one with ``fused_backward``) was prepared.
    """

    def __init__(self) -> None:
        self.models: list[torch.nn.Module] = []
        self.optimizers: list[Any] = []  # AcceleratedOptimizer, or an engine's own wrapper
        self.schedulers: list[Any] = []  # AcceleratedScheduler, or an engine's own scheduler
        self.dataloaders: list[DataLoader[Any]] = []
        self.custom_objects: list[Stateful] = []
        self.original_loaders: weakref.WeakSet[DataLoader[Any]] = weakref.WeakSet()
        self.has_lomo_optimizer = False

    # -- recording -----------------------------------------------------------------------------

    def add_model(self, model: torch.nn.Module) -> None:
        """Record ``model`` (once: a model prepared again is not listed twice)."""
        if not any(model is known for known in self.models):
            self.models.append(model)

    def add_optimizer(self, optimizer: Any, *, lomo: bool = False) -> None:
        """Record ``optimizer``; ``lomo`` when the optimizer it wraps is a LOMO one."""
        self.optimizers.append(optimizer)
        self.has_lomo_optimizer |= lomo

    def add_scheduler(self, scheduler: Any) -> None:
        """Record ``scheduler``."""
        self.schedulers.append(scheduler)

    def add_dataloader(self, prepared: DataLoader[Any]) -> None:
        """Record the sharded loader ``prepare`` returns."""
        self.dataloaders.append(prepared)

    def receive_loader(self, data_loader: DataLoader[Any]) -> None:
        """Refuse a data loader ``prepare`` already returned or received, else note it."""
        if any(data_loader is loader for loader in self.dataloaders):
            raise ValueError(
                f"this {type(data_loader).__name__} was returned by prepare() already; preparing "
                "it again would shard the shards. Pass the original DataLoader once, and use what "
                "prepare() returned."
            )
        if data_loader in self.original_loaders:
            raise ValueError(
                "this DataLoader was passed to prepare() already; each data loader is prepared "
                "once. Reuse the prepared loader prepare() returned the first time."
            )
        self.original_loaders.add(data_loader)

    def add_custom_objects(self, objects: Sequence[Stateful]) -> None:
        """Record objects given to ``register_for_checkpointing`` (checked by the checkpointer)."""
        self.custom_objects.extend(objects)

    def forget(self) -> None:
        """Drop the prepared models, optimizers, schedulers and data loaders (``free_memory``);
        the lists are replaced, so lists handed out earlier keep their objects."""
        self.models, self.optimizers, self.schedulers, self.dataloaders = [], [], [], []

    # -- questions -----------------------------------------------------------------------------

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """Whether the last step of a prepared optimizer was skipped (fp16 overflow)."""
        return any(opt.step_was_skipped for opt in self.optimizers)

    def owners_of(
        self, parameters: Sequence[torch.nn.Parameter]
    ) -> tuple[torch.nn.Module | None, torch.optim.Optimizer | None]:
        """The prepared model holding every one of ``parameters`` (else the first holding any of
        them, else None) and the prepared optimizer stepping any of them (else None)."""
        wanted = {id(p) for p in parameters}
        module: torch.nn.Module | None = None
        for model in self.models:
            held = {id(p) for p in model.parameters()}
            if wanted and wanted <= held:
                module = model
                break
            if module is None and wanted & held:
                module = model
        optimizer = next(
            (
                opt
                for opt in self.optimizers
                if any(id(p) in wanted for group in opt.param_groups for p in group["params"])
            ),
            None,
        )
        return module, optimizer

    # -- pickling ------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """What ``pickle`` keeps (an Accelerator is pickled with its registry, as in
        Accelerate): the weak set of original loaders is kept as a list, rebuilt when loaded."""
        state = dict(self.__dict__)
        state["original_loaders"] = list(self.original_loaders)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.original_loaders = weakref.WeakSet(state["original_loaders"])
