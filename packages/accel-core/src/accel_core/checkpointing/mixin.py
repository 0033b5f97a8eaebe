"""The checkpoint methods of ``Accelerator``: ``save_state``, ``load_state`` and their hooks.

Each delegates to the Accelerator's :class:`~accel_core.checkpointing.checkpointer.Checkpointer`,
which holds the logic; see docs/guides/checkpointing.md for the on-disk layout and the guarantees.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from torch.utils.hooks import RemovableHandle

from accel_core.checkpointing.checkpointer import Checkpointer, LoadHook, SaveHook

if TYPE_CHECKING:
    from accel_core.checkpointing.background import BackgroundSaver

__all__ = ["CheckpointingMixin", "LoadHook", "SaveHook"]


class CheckpointingMixin:
    """``save_state``, ``load_state``, ``register_for_checkpointing`` and the pre-hooks, for a
    class whose ``_checkpointer`` is its :class:`Checkpointer`."""

    _checkpointer: Checkpointer

    @property
    def save_iteration(self) -> int:
        """The number of the next automatic checkpoint (``checkpoint_<n>``)."""
        return self._checkpointer.save_iteration

    @property
    def _background_saver(self) -> BackgroundSaver:
        """The saver of ``save_state(async_save=True)``."""
        return self._checkpointer.background_saver

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load ``objects`` with the checkpoint (each needs ``state_dict`` and
        ``load_state_dict``); they are stored as ``custom_checkpoint_<i>.pkl`` in this order."""
        self._checkpointer.register_for_checkpointing(*objects)

    def register_save_state_pre_hook(self, hook: SaveHook) -> RemovableHandle:
        """Run ``hook(models, weights, output_dir)`` in ``save_state`` before anything is written.

        ``weights`` are the state dicts about to be saved; a hook may remove entries (to save a
        model its own way). Returns a handle whose ``remove()`` unregisters the hook.
        """
        return self._checkpointer.register_save_state_pre_hook(hook)

    def register_load_state_pre_hook(self, hook: LoadHook) -> RemovableHandle:
        """Run ``hook(models, input_dir)`` in ``load_state`` before the models are loaded.

        A hook may remove models from the list (it loaded them its own way). Returns a handle
        whose ``remove()`` unregisters the hook.
        """
        return self._checkpointer.register_load_state_pre_hook(hook)

    def wait_for_checkpoint(self) -> None:
        """Block until an asynchronous ``save_state`` finished; raise the error if it failed."""
        self._checkpointer.wait()

    def save_state(
        self,
        output_dir: str | os.PathLike[str] | None = None,
        safe_serialization: bool = True,
        async_save: bool = False,
        **save_model_func_kwargs: Any,
    ) -> str:
        """Save models, optimizers, schedulers, the scaler, loader positions, RNG states, the step
        and registered objects into ``output_dir`` (with automatic naming,
        ``<project_dir>/checkpoints/checkpoint_<n>``). Call it on every process.

        The checkpoint is written into a temporary folder and renamed into place when every
        process has finished, with a manifest of sizes and checksums, so a crash never leaves a
        half-written checkpoint under the final name. With ``async_save`` the state is copied to
        CPU and written in the background; the next ``save_state``, ``load_state`` or
        ``end_training`` waits for it. ``save_model_func_kwargs`` are accepted for Accelerate's
        signature (its DeepSpeed engine takes them); the built-in strategies use none, and any
        given is an error rather than silently dropped. Returns the checkpoint folder.
        """
        return self._checkpointer.save_state(
            output_dir, safe_serialization, async_save, **save_model_func_kwargs
        )

    def load_state(
        self,
        input_dir: str | os.PathLike[str] | None = None,
        load_kwargs: dict[str, Any] | None = None,
        **load_model_func_kwargs: Any,
    ) -> None:
        """Restore everything ``save_state`` saved (also from Hugging Face Accelerate's
        checkpoints). Without ``input_dir``, with automatic naming, the latest complete
        checkpoint. Call it on every process.

        Everything is read and checked before anything changes. ``load_kwargs`` go to
        ``torch.load`` (``{"weights_only": False}`` to unpickle arbitrary objects of a trusted
        checkpoint); ``load_model_func_kwargs`` may hold ``map_location`` and ``strict``.
        """
        self._checkpointer.load_state(input_dir, load_kwargs, **load_model_func_kwargs)
