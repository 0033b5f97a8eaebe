"""``Checkpointer``: ``save_state``, ``load_state`` and their hooks, for one ``Accelerator``.

The Accelerator builds one from its strategy, its :class:`~accel_core.prepared_objects.
PreparedObjects`, its project configuration, its accumulation counter (the step is saved and
restored), its process state, its fp16 scaler and its trackers (their run states are kept in the
manifest), and delegates its checkpoint methods to it (see :mod:`.mixin`). See
docs/guides/checkpointing.md for the on-disk layout and the guarantees.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.utils.hooks import RemovableHandle

# What saving and loading need (object storage, the snapshot, the background saver, the reader)
# is imported by the methods that save or load: building a Checkpointer imports none of it.
from accel_core.checkpointing import folders, names
from accel_core.checkpointing.errors import CheckpointError

if TYPE_CHECKING:
    from accel_core.accumulation import Accumulation
    from accel_core.checkpointing.background import BackgroundSaver
    from accel_core.checkpointing.object_storage import RemoteFolder
    from accel_core.checkpointing.snapshot import Snapshot
    from accel_core.configuration import ProjectConfiguration
    from accel_core.prepared_objects import PreparedObjects, Stateful
    from accel_core.state import AcceleratorState
    from accel_core.strategies import Strategy
    from accel_core.tracking.experiment import ExperimentTracking

    #: Where a checkpoint is: a local folder, or a folder at a URL.
    Location = Path | RemoteFolder

logger = logging.getLogger(__name__)

SaveHook = Callable[[list[torch.nn.Module], list[dict[str, Any]], str], None]
LoadHook = Callable[[list[torch.nn.Module], str], None]


class Checkpointer:
    """Saves and restores everything an ``Accelerator`` prepared or registered.

    Args:
        strategy: writes and reads the model and optimizer states (see the checkpoint calls of
            :class:`~accel_core.Strategy`).
        prepared: the prepared and registered objects to save and restore.
        project_configuration: automatic naming, ``total_limit``, ``save_on_each_node``.
        accumulation: the batch counter (``accelerator.step``), saved and restored.
        state: the process state (ranks, the timeout of the rendezvous).
        scaler: the fp16 gradient scaler, or None.
        tracking: the trackers, whose run states the manifest keeps.
    """

    def __init__(
        self,
        strategy: Strategy,
        prepared: PreparedObjects,
        project_configuration: ProjectConfiguration,
        *,
        accumulation: Accumulation,
        state: AcceleratorState,
        scaler: torch.amp.GradScaler | None,
        tracking: ExperimentTracking,
    ) -> None:
        self.strategy = strategy
        self.prepared = prepared
        self.project_configuration = project_configuration
        self.accumulation = accumulation
        self.state = state
        self.scaler = scaler
        self.tracking = tracking
        self.save_pre_hooks: OrderedDict[int, SaveHook] = OrderedDict()
        self.load_pre_hooks: OrderedDict[int, LoadHook] = OrderedDict()
        self._background_saver: BackgroundSaver | None = None
        #: whether ``load_state`` ran (auto-resume leaves a script that loads by itself alone)
        self.loaded_any = False

    @property
    def background_saver(self) -> BackgroundSaver:
        """The saver of ``save_state(async_save=True)``, made on first use."""
        if self._background_saver is None:
            from accel_core.checkpointing.background import BackgroundSaver

            self._background_saver = BackgroundSaver()
        return self._background_saver

    @property
    def save_iteration(self) -> int:
        """The number of the next automatic checkpoint (``checkpoint_<n>``)."""
        return self.project_configuration.iteration

    def register_for_checkpointing(self, *objects: object) -> None:
        """Save and load ``objects`` with the checkpoint; each needs ``state_dict`` and
        ``load_state_dict`` (else ``ValueError`` naming the others, and none is registered)."""
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
        self.prepared.add_custom_objects(cast("tuple[Stateful, ...]", objects))  # checked above

    def register_save_state_pre_hook(self, hook: SaveHook) -> RemovableHandle:
        """Run ``hook(models, weights, output_dir)`` in ``save_state`` before anything is written;
        returns a handle whose ``remove()`` unregisters it."""
        handle = RemovableHandle(self.save_pre_hooks)
        self.save_pre_hooks[handle.id] = hook
        return handle

    def register_load_state_pre_hook(self, hook: LoadHook) -> RemovableHandle:
        """Run ``hook(models, input_dir)`` in ``load_state`` before the models are loaded;
        returns a handle whose ``remove()`` unregisters it."""
        handle = RemovableHandle(self.load_pre_hooks)
        self.load_pre_hooks[handle.id] = hook
        return handle

    def wait(self) -> None:
        """Block until an asynchronous save finished; raise the error if it failed."""
        if self._background_saver is not None:
            self._background_saver.wait()

    def release(self) -> None:
        """Wait for an asynchronous save, then drop the CPU copies kept for the next one."""
        if self._background_saver is not None:
            self._background_saver.release()

    # -- save ----------------------------------------------------------------------------------

    def save_state(
        self,
        output_dir: str | os.PathLike[str] | None = None,
        safe_serialization: bool = True,
        async_save: bool = False,
        **save_model_func_kwargs: Any,
    ) -> str:
        """Save everything into ``output_dir`` (or the next automatic folder); returns the
        folder. See :meth:`accel_core.Accelerator.save_state`."""
        from accel_core.checkpointing import commit, remote_checkpoints, snapshot
        from accel_core.checkpointing.object_storage import RemoteFolder

        self.background_saver.wait()
        if save_model_func_kwargs:
            raise TypeError(
                f"save_state got {sorted(save_model_func_kwargs)}: strategy "
                f"{self.strategy.name!r} takes no extra save arguments."
            )
        target, checkpoints_dir = self._checkpoint_target(output_dir)
        strategy = self.strategy
        if async_save and not strategy.checkpoint_io.supports_async_save:
            raise CheckpointError(
                f"save_state(async_save=True): strategy {strategy.name!r} saves through its own "
                "engine and can't write in the background; call save_state without async_save."
            )
        if isinstance(target, RemoteFolder):
            temporary = remote_checkpoints.prepare_save(self, target)
        else:
            temporary = folders.temporary_folder(target)
            if self._writes_checkpoint_files():
                folders.prepare_temporary(target)
        self.meet("save_state")
        weights = strategy.checkpoint_io.checkpoint_model_states(self.prepared.models)
        for hook in self.save_pre_hooks.values():
            hook(self.prepared.models, weights, str(temporary))
        state = snapshot.take(
            self,
            target,
            temporary,
            weights,
            safe_serialization,
            copy=async_save,
            staging=self.background_saver.staging,
        )
        if checkpoints_dir is not None:
            state.checkpoints_dir = checkpoints_dir
            state.total_limit = self.project_configuration.total_limit
        state.cleans_staging = isinstance(target, RemoteFolder) and self.state.is_local_main_process
        if self.project_configuration.automatic_checkpoint_naming:
            self.project_configuration.iteration += 1
        if async_save:
            self.background_saver.start(state, strategy)
        else:
            commit.write_and_commit(state, strategy)
            _log_removed(state)
        logger.info("Saved state to %s", target)
        return str(target)

    def _writes_checkpoint_files(self) -> bool:
        if self.project_configuration.save_on_each_node:
            return self.state.is_local_main_process
        return self.state.is_main_process

    def _checkpoint_target(
        self, output_dir: str | os.PathLike[str] | None
    ) -> tuple[Location, Location | None]:
        from accel_core.checkpointing.object_storage import RemoteFolder

        config = self.project_configuration
        if config.automatic_checkpoint_naming:
            if config.project_dir is None:
                raise CheckpointError(
                    "save_state: automatic_checkpoint_naming needs a project_dir in "
                    "ProjectConfiguration (or Accelerator(project_dir=...))."
                )
            project = self._location(config.project_dir, "save_state")
            if isinstance(project, RemoteFolder):
                checkpoints = project.child(names.CHECKPOINTS_FOLDER)
                remote = checkpoints.child(names.automatic_folder(config.iteration))
                if remote.has_manifest():
                    raise CheckpointError(
                        f"save_state: {remote} already exists; checkpoint numbering is at "
                        f"{config.iteration}. load_state continues the numbering after the loaded "
                        "checkpoint; otherwise set project_configuration.iteration."
                    )
                return remote, checkpoints
            checkpoints_dir = project / names.CHECKPOINTS_FOLDER
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
        target = self._location(output_dir, "save_state")
        if isinstance(target, RemoteFolder):
            return target, None
        if target.exists() and not target.is_dir():
            raise CheckpointError(f"save_state: {target} exists and is a file, expected a folder.")
        return target, None

    def meet(self, operation: str, report: str | None = None) -> list[str]:
        """Wait for every process to call ``operation`` (see :mod:`.rendezvous`); the reports
        they brought, in rank order."""
        num_processes = self.state.num_processes
        if num_processes <= 1:
            return [] if report is None else [report]
        from accel_core.checkpointing import rendezvous

        return rendezvous.meet(
            operation,
            self.state.process_index,
            num_processes,
            self.state.timeout.total_seconds(),
            report,
        )

    # -- load ----------------------------------------------------------------------------------

    def load_state(
        self,
        input_dir: str | os.PathLike[str] | None = None,
        load_kwargs: dict[str, Any] | None = None,
        **load_model_func_kwargs: Any,
    ) -> None:
        """Restore everything ``save_state`` saved from ``input_dir`` (or the latest automatic
        checkpoint). See :meth:`accel_core.Accelerator.load_state`."""
        from accel_core.checkpointing import remote_checkpoints
        from accel_core.checkpointing.object_storage import RemoteFolder

        self.wait()
        source = self._checkpoint_source(input_dir)
        if isinstance(source, RemoteFolder):
            staging = remote_checkpoints.download_for_loading(self, source)
            try:
                self._load(staging, source.name, load_kwargs, load_model_func_kwargs, verified=True)
            finally:
                remote_checkpoints.finish_loading(self, staging)
        else:
            self._load(source, source.name, load_kwargs, load_model_func_kwargs)
        logger.info("Loaded state from %s", source)

    def _load(
        self,
        folder: Path,
        folder_name: str,
        load_kwargs: dict[str, Any] | None,
        load_model_func_kwargs: dict[str, Any],
        verified: bool = False,
    ) -> None:
        from accel_core.checkpointing import restore

        options = dict(load_kwargs or {})
        weights_only = bool(options.pop("weights_only", True))
        reader = restore.open_checked(self, folder, weights_only, verified)
        models = list(self.prepared.models)
        for hook in self.load_pre_hooks.values():
            hook(models, str(folder))
        map_location = load_model_func_kwargs.pop("map_location", None)
        if map_location in (None, "cpu"):
            map_location = "cpu"
        elif map_location == "on_device":
            map_location = self.strategy.root_device
        strict = bool(load_model_func_kwargs.pop("strict", True))
        step = restore.load(self, reader, models, map_location, strict)
        if step is not None:
            self.accumulation.step = step
        number = folders.iteration_of(Path(folder_name))
        config = self.project_configuration
        if number is not None and config.automatic_checkpoint_naming:
            config.iteration = number + 1
        self.loaded_any = True

    def has_complete_checkpoint(self) -> bool:
        """Whether the project folder holds a complete automatic checkpoint to resume from."""
        from accel_core.checkpointing import object_storage

        config = self.project_configuration
        if not (config.automatic_checkpoint_naming and config.project_dir):
            return False
        project = self._location(config.project_dir, "load_state")
        if isinstance(project, object_storage.RemoteFolder):
            checkpoints = project.child(names.CHECKPOINTS_FOLDER)
            return bool(object_storage.automatic_checkpoints(checkpoints))
        return bool(folders.automatic_checkpoints(project / names.CHECKPOINTS_FOLDER))

    def _location(self, value: str | os.PathLike[str], operation: str) -> Location:
        from accel_core.checkpointing import object_storage

        options = self.project_configuration.storage_options
        return object_storage.location(value, options, operation=operation)

    def _checkpoint_source(self, input_dir: str | os.PathLike[str] | None) -> Location:
        from accel_core.checkpointing import object_storage
        from accel_core.checkpointing.object_storage import RemoteFolder

        config = self.project_configuration
        if input_dir is not None:
            folder = self._location(input_dir, "load_state")
            if isinstance(folder, RemoteFolder):
                return folder
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
            project = self._location(config.project_dir, "load_state")
            if isinstance(project, RemoteFolder):
                return object_storage.latest_checkpoint(project.child(names.CHECKPOINTS_FOLDER))
            return folders.latest_checkpoint(project / names.CHECKPOINTS_FOLDER)
        raise CheckpointError(
            "load_state needs input_dir, or ProjectConfiguration(automatic_checkpoint_naming=True,"
            " project_dir=...) to pick the latest checkpoint."
        )


def _log_removed(state: Snapshot) -> None:
    for folder in state.removed:
        logger.info("total_limit: removed the older checkpoint %s", folder)
