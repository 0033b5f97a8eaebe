"""The checkpoint methods of ``Accelerator``: ``save_state``, ``load_state`` and their hooks.

See docs/guides/checkpointing.md for the on-disk layout and the guarantees.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

from accel_core.checkpointing import folders, names
from accel_core.checkpointing.background import BackgroundSaver
from accel_core.checkpointing.errors import CheckpointError

if TYPE_CHECKING:
    from accel_core.checkpointing.snapshot import Snapshot

logger = logging.getLogger(__name__)

SaveHook = Callable[[list[torch.nn.Module], list[dict[str, Any]], str], None]
LoadHook = Callable[[list[torch.nn.Module], str], None]


class CheckpointingMixin:
    """``save_state``, ``load_state``, ``register_for_checkpointing`` and the pre-hooks."""

    def _setup_checkpointing(self) -> None:
        self._custom_objects: list[Any] = []
        self._save_model_state_pre_hook: OrderedDict[int, SaveHook] = OrderedDict()
        self._load_model_state_pre_hook: OrderedDict[int, LoadHook] = OrderedDict()
        self._background_saver = BackgroundSaver()

    @property
    def save_iteration(self) -> int:
        """The number of the next automatic checkpoint (``checkpoint_<n>``)."""
        return self.project_configuration.iteration  # type: ignore[attr-defined]

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load ``objects`` with the checkpoint (each needs ``state_dict`` and
        ``load_state_dict``); they are stored as ``custom_checkpoint_<i>.pkl`` in this order."""
        invalid = [
            f"\n\t- Item at index {index}, `{type(obj).__name__}`"
            for index, obj in enumerate(objects)
            if not (callable(getattr(obj, "state_dict", None)))
            or not callable(getattr(obj, "load_state_dict", None))
        ]
        if invalid:
            # Accelerate's error type and words, which scripts catch and people search for
            raise ValueError(
                "All `objects` must include a `state_dict` and `load_state_dict` function to be "
                f"stored. The following inputs are invalid:{''.join(invalid)}\nWrap each in a "
                "small class that has both methods."
            )
        self._custom_objects.extend(objects)

    def register_save_state_pre_hook(self, hook: SaveHook) -> RemovableHandle:
        """Run ``hook(models, weights, output_dir)`` in ``save_state`` before anything is written.

        ``weights`` are the state dicts about to be saved; a hook may remove entries (to save a
        model its own way). Returns a handle whose ``remove()`` unregisters the hook.
        """
        handle = RemovableHandle(self._save_model_state_pre_hook)
        self._save_model_state_pre_hook[handle.id] = hook
        return handle

    def register_load_state_pre_hook(self, hook: LoadHook) -> RemovableHandle:
        """Run ``hook(models, input_dir)`` in ``load_state`` before the models are loaded.

        A hook may remove models from the list (it loaded them its own way). Returns a handle
        whose ``remove()`` unregisters the hook.
        """
        handle = RemovableHandle(self._load_model_state_pre_hook)
        self._load_model_state_pre_hook[handle.id] = hook
        return handle

    def wait_for_checkpoint(self) -> None:
        """Block until an asynchronous ``save_state`` finished; raise the error if it failed."""
        self._background_saver.wait()

    # -- save ----------------------------------------------------------------------------------

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
        from accel_core.checkpointing import commit, snapshot

        self._background_saver.wait()
        if save_model_func_kwargs:
            raise TypeError(
                f"save_state got {sorted(save_model_func_kwargs)}: strategy "
                f"{self.strategy.name!r} takes no extra save arguments."  # type: ignore[attr-defined]
            )
        target, checkpoints_dir = self._checkpoint_target(output_dir)
        strategy = self.strategy  # type: ignore[attr-defined]
        if async_save and not strategy.supports_async_save:
            raise CheckpointError(
                f"save_state(async_save=True): strategy {strategy.name!r} saves through its own "
                "engine and can't write in the background; call save_state without async_save."
            )
        temporary = folders.temporary_folder(target)
        writes_here = self._writes_checkpoint_files()
        if writes_here:
            folders.prepare_temporary(target)
        self._meet("save_state")
        weights = strategy.checkpoint_model_states(self._models)  # type: ignore[attr-defined]
        for hook in self._save_model_state_pre_hook.values():
            hook(self._models, weights, str(temporary))  # type: ignore[attr-defined]
        state = snapshot.take(
            self,  # type: ignore[arg-type]
            target,
            temporary,
            weights,
            safe_serialization,
            copy=async_save,
            staging=self._background_saver.staging,
        )
        if checkpoints_dir is not None:
            state.checkpoints_dir = checkpoints_dir
            state.total_limit = self.project_configuration.total_limit  # type: ignore[attr-defined]
        if self.project_configuration.automatic_checkpoint_naming:  # type: ignore[attr-defined]
            self.project_configuration.iteration += 1  # type: ignore[attr-defined]
        if async_save:
            self._background_saver.start(state, strategy)
        else:
            commit.write_and_commit(state, strategy)
            _log_removed(state)
        logger.info("Saved state to %s", target)
        return str(target)

    def _writes_checkpoint_files(self) -> bool:
        if self.project_configuration.save_on_each_node:  # type: ignore[attr-defined]
            return bool(self.is_local_main_process)  # type: ignore[attr-defined]
        return bool(self.is_main_process)  # type: ignore[attr-defined]

    def _checkpoint_target(
        self, output_dir: str | os.PathLike[str] | None
    ) -> tuple[Path, Path | None]:
        config = self.project_configuration  # type: ignore[attr-defined]
        if config.automatic_checkpoint_naming:
            if config.project_dir is None:
                raise CheckpointError(
                    "save_state: automatic_checkpoint_naming needs a project_dir in "
                    "ProjectConfiguration (or Accelerator(project_dir=...))."
                )
            checkpoints_dir = Path(config.project_dir) / names.CHECKPOINTS_FOLDER
            target = checkpoints_dir / names.automatic_folder(config.iteration)
            if target.exists():
                raise CheckpointError(
                    f"save_state: {target} already exists; checkpoint numbering is at "
                    f"{config.iteration}. load_state continues the numbering after the loaded "
                    "checkpoint; otherwise set project_configuration.iteration."
                )
            return target, checkpoints_dir
        if output_dir is None:
            raise CheckpointError(
                "save_state needs output_dir, or ProjectConfiguration("
                "automatic_checkpoint_naming=True, project_dir=...)."
            )
        target = Path(output_dir).expanduser()
        if target.exists() and not target.is_dir():
            raise CheckpointError(f"save_state: {target} exists and is a file, expected a folder.")
        return target, None

    def _meet(self, operation: str, report: str | None = None) -> list[str]:
        """Wait for every process to call ``operation`` (see :mod:`.rendezvous`); the reports
        they brought, in rank order."""
        if self.num_processes <= 1:  # type: ignore[attr-defined]
            return [] if report is None else [report]
        from accel_core.checkpointing import rendezvous

        timeout = self.state.partial._shared_state.get("timeout")  # type: ignore[attr-defined]
        return rendezvous.meet(
            operation,
            self.process_index,  # type: ignore[attr-defined]
            self.num_processes,  # type: ignore[attr-defined]
            timeout.total_seconds() if timeout is not None else None,
            report,
        )

    # -- load ----------------------------------------------------------------------------------

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
        from accel_core.checkpointing import restore

        self._background_saver.wait()
        folder = self._checkpoint_source(input_dir)
        options = dict(load_kwargs or {})
        weights_only = bool(options.pop("weights_only", True))
        reader = restore.open_checked(self, folder, weights_only)  # type: ignore[arg-type]
        models = list(self._models)  # type: ignore[attr-defined]
        for hook in self._load_model_state_pre_hook.values():
            hook(models, str(folder))
        map_location = load_model_func_kwargs.pop("map_location", None)
        if map_location in (None, "cpu"):
            map_location = "cpu"
        elif map_location == "on_device":
            map_location = self.device  # type: ignore[attr-defined]
        strict = bool(load_model_func_kwargs.pop("strict", True))
        restore.load(self, reader, models, map_location, strict)  # type: ignore[arg-type]
        number = folders.iteration_of(folder)
        config = self.project_configuration  # type: ignore[attr-defined]
        if number is not None and config.automatic_checkpoint_naming:
            config.iteration = number + 1
        logger.info("Loaded state from %s", folder)

    def _checkpoint_source(self, input_dir: str | os.PathLike[str] | None) -> Path:
        config = self.project_configuration  # type: ignore[attr-defined]
        if input_dir is not None:
            folder = Path(input_dir).expanduser()
            if not folder.is_dir():
                hidden = folders.temporary_folder(folder)
                more = (
                    f" (only {hidden.name} exists: that save never finished)"
                    if hidden.is_dir()
                    else ""
                )
                raise CheckpointError(f"load_state: {folder} is not a folder{more}.")
            return folder
        if config.automatic_checkpoint_naming and config.project_dir is not None:
            return folders.latest_checkpoint(Path(config.project_dir) / names.CHECKPOINTS_FOLDER)
        raise CheckpointError(
            "load_state needs input_dir, or ProjectConfiguration(automatic_checkpoint_naming=True,"
            " project_dir=...) to pick the latest checkpoint."
        )


def _log_removed(state: Snapshot) -> None:
    for folder in state.removed:
        logger.info("total_limit: removed the older checkpoint %s", folder)
