"""Gradient-accumulation state shared by the Accelerator, its wrappers and the prepared loaders.

``GradientState`` follows Hugging Face Accelerate's shared-state pattern: every instance reads and
writes one dictionary, so ``GradientState()`` anywhere in the process sees the same values. The
data loaders register themselves while they iterate (``_add_dataloader`` / ``_remove_dataloader``);
``end_of_dataloader`` and ``remainder`` are read from the innermost loader being iterated.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accel_core.kwargs_handlers import KwargsHandler


@dataclass
class GradientAccumulationPlugin(KwargsHandler):
    """How gradient accumulation behaves (``to_kwargs()`` gives the non-default values).

    Args:
        num_steps: number of batches whose gradients are accumulated before one optimizer step
            (``None`` means 1, no accumulation).
        adjust_scheduler: advance the scheduler's step count on accumulation steps too, for a
            scheduler that was not written with accumulation in mind.
        sync_with_dataloader: force a synchronisation (and an optimizer step) on the last batch of
            a data loader even when ``num_steps`` batches were not seen yet.
        sync_each_batch: synchronise gradients on every batch (less memory, more communication).
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False

    def __post_init__(self) -> None:
        if self.num_steps is not None and (
            isinstance(self.num_steps, bool)
            or not isinstance(self.num_steps, int)
            or self.num_steps < 1
        ):
            raise ValueError(
                f"GradientAccumulationPlugin(num_steps={self.num_steps!r}): num_steps must be an "
                "integer >= 1 (1 means no accumulation) or None."
            )


# Values of the properties when no plugin set them (the plugin's documented defaults).
_PLUGIN_DEFAULTS: dict[str, Any] = {
    "num_steps": 1,
    "adjust_scheduler": True,
    "sync_with_dataloader": True,
    "sync_each_batch": False,
}


class GradientState:
    """Process-wide state of gradient synchronisation and of the data loaders being iterated.

    Every instance shares one ``__dict__``: the first construction initialises it, later ones
    only update ``plugin_kwargs`` when they are given a plugin with different values.

    Attributes:
        sync_gradients: whether the current step synchronises gradients and steps the optimizer.
        plugin_kwargs: the gradient-accumulation options that differ from their defaults.
    """

    _shared_state: dict[str, Any] = {}

    def __init__(
        self, gradient_accumulation_plugin: GradientAccumulationPlugin | None = None
    ) -> None:
        self.__dict__ = self._shared_state
        if not self.initialized:
            self.sync_gradients = True
            self._dataloader_references_ref: list[weakref.ref[Any] | None] = [None]
            self.plugin_kwargs: dict[str, Any] = (
                gradient_accumulation_plugin.to_kwargs()
                if gradient_accumulation_plugin is not None
                else {}
            )
            self._is_xla_gradients_synced = False
        if gradient_accumulation_plugin is not None:
            new_kwargs = gradient_accumulation_plugin.to_kwargs()
            if new_kwargs != self.plugin_kwargs:
                self.plugin_kwargs = new_kwargs

    def _set_step_boundary_hook(self, hook: Callable[[], None] | None) -> None:
        """Run ``hook`` each time a prepared loader is asked for its next batch (the
        Accelerator's preemption watch; ``None`` removes it)."""
        self.__dict__["_step_boundary_hook"] = hook

    def _set_iteration_hook(self, hook: Callable[[Any], bool] | None) -> None:
        """Call ``hook(loader)`` as each prepared loader starts an iteration; a True answer makes
        that iteration empty (auto-resume's finished epochs; ``None`` removes it)."""
        self.__dict__["_iteration_hook"] = hook

    def _iteration_starting(self, loader: Any) -> bool:
        """A prepared loader starts an iteration; True when it must yield nothing."""
        hook = self.__dict__.get("_iteration_hook")
        return bool(hook(loader)) if hook is not None else False

    def _batch_requested(self) -> None:
        """A prepared loader was asked for its next batch: the step before it is over."""
        hook = self.__dict__.get("_step_boundary_hook")
        if hook is not None:
            hook()

    @property
    def initialized(self) -> bool:
        """Whether a ``GradientState`` was constructed since the last ``_reset_state``.

        Keyed on ``plugin_kwargs``: a loader iterator that outlived ``_reset_state`` may still
        write its own bookkeeping into the shared dict, which must not count as initialised."""
        return "plugin_kwargs" in GradientState._shared_state

    def _plugin_value(self, name: str) -> Any:
        value = self.plugin_kwargs.get(name)
        return _PLUGIN_DEFAULTS[name] if value is None else value

    @property
    def num_steps(self) -> int:
        """Number of batches accumulated per optimizer step (1 without accumulation)."""
        return int(self._plugin_value("num_steps"))

    @property
    def adjust_scheduler(self) -> bool:
        """Whether the scheduler is advanced on accumulation steps too."""
        return bool(self._plugin_value("adjust_scheduler"))

    @property
    def sync_with_dataloader(self) -> bool:
        """Whether the last batch of a data loader always synchronises gradients."""
        return bool(self._plugin_value("sync_with_dataloader"))

    @property
    def sync_each_batch(self) -> bool:
        """Whether gradients are synchronised on every batch."""
        return bool(self._plugin_value("sync_each_batch"))

    @property
    def dataloader_references(self) -> list[Any]:
        """Data loaders being iterated, outermost first; starts with ``None`` (no loader)."""
        # Tolerates a state cleared by ``_reset_state`` while a loader was still iterating.
        refs = self.__dict__.get("_dataloader_references_ref", [None])
        return [ref() if ref is not None else None for ref in refs]

    @dataloader_references.setter
    def dataloader_references(self, references: list[Any]) -> None:
        # Weak references: a loader abandoned mid-iteration must still be garbage collected.
        self._dataloader_references_ref = [
            weakref.ref(loader) if loader is not None else None for loader in references
        ]

    @property
    def active_dataloader(self) -> Any:
        """The innermost data loader being iterated, or ``None``."""
        return self.dataloader_references[-1]

    @property
    def in_dataloader(self) -> bool:
        """Whether a prepared data loader is being iterated."""
        return self.active_dataloader is not None

    @property
    def end_of_dataloader(self) -> bool:
        """Whether the batch just yielded by the active data loader is its last one."""
        if not self.in_dataloader:
            return False
        return bool(self.active_dataloader.end_of_dataloader)

    @property
    def remainder(self) -> int:
        """Number of real samples in the last global batch of the active loader.

        ``0`` when the dataset divides into full global batches (nothing was duplicated), ``-1``
        when unknown or when no loader is active. ``gather_for_metrics`` keeps the first
        ``remainder`` gathered samples of the last batch and drops the duplicated tail.
        """
        if not self.in_dataloader:
            return -1
        return int(self.active_dataloader.remainder)

    @property
    def is_xla_gradients_synced(self) -> bool:
        """Whether XLA gradients were reduced for this step (the XLA strategy sets it)."""
        return bool(self._is_xla_gradients_synced)

    @is_xla_gradients_synced.setter
    def is_xla_gradients_synced(self, is_synced: bool) -> None:
        self._is_xla_gradients_synced = is_synced

    def _set_sync_gradients(self, sync_gradients: bool) -> None:
        """Set whether this step synchronises gradients (called by the Accelerator)."""
        self.sync_gradients = sync_gradients

    def _add_dataloader(self, dataloader: Any) -> None:
        """Mark ``dataloader`` as being iterated (called by a prepared loader's ``__iter__``)."""
        # Assignment (not append) so that the setter wraps the loader in a weak reference.
        self.dataloader_references = [*self.dataloader_references, dataloader]

    def _remove_dataloader(self, dataloader: Any) -> None:
        """Mark one iteration of ``dataloader`` as finished (called when it ends).

        Only one entry goes, as each iteration added one: an abandoned iterator of the same loader
        (transformers' Trainer leaves each epoch's suspended after its last batch) may be closed by
        the garbage collector while the next epoch iterates, at a moment that differs between
        processes; removing every entry then ended the live iteration on one process only, and
        the processes' collectives in ``gather_for_metrics`` no longer matched.
        """
        references = self.dataloader_references
        for index in range(len(references) - 1, 0, -1):
            if references[index] is dataloader:
                del references[index]
                break
        self.dataloader_references = references

    def __reduce__(self) -> tuple[type[GradientState], tuple[()]]:
        # A pickled loader carries its GradientState: unpickling joins the receiving process's
        # shared state instead of copying this one (which holds weak references).
        return (GradientState, ())

    def __repr__(self) -> str:
        return (
            f"Sync Gradients: {self.sync_gradients}\n"
            f"At end of current dataloader: {self.end_of_dataloader}\n"
            f"Extra samples added: {self.remainder}\n"
            f"Gradient accumulation plugin: {self.plugin_kwargs}\n"
        )

    @staticmethod
    def _reset_state() -> None:
        """Forget the shared state (for tests): the next ``GradientState()`` starts fresh."""
        GradientState._shared_state.clear()
