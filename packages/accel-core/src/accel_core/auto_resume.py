"""Auto-resume: one switch for scripts that don't call ``load_state()`` themselves.

With ``ACCEL_AUTO_RESUME`` on (``accel launch --auto_resume``, or the config key
``auto_resume``), the first time a prepared data loader is iterated, before it yields anything,
the Accelerator loads the latest complete checkpoint of the project folder (the one a preemption,
a periodic ``save_state()`` or a restart left) with ``load_state()``, the same call a script makes
itself. Everything prepared or registered by then is restored. Each prepared loader then goes on
exactly where the checkpoint was: the epochs it had finished are iterated as empty (the loop body
does not run for them; code after the inner loop does), and the epoch it was in continues after
the batches already trained, with the random numbers of the uninterrupted run.

That fits the usual loop, ``for epoch in range(num_epochs): for batch in loader: ...``, iterating
each loader once per epoch from epoch 0. A script that calls ``load_state()`` before its first
batch is left alone. With no checkpoint yet, nothing happens.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel_core.accelerator import Accelerator

VARIABLE = "ACCEL_AUTO_RESUME"


def requested(environ: dict[str, str] | None = None) -> bool:
    """Whether ``ACCEL_AUTO_RESUME`` is on."""
    from accel_base.env_values import TRUE_STRINGS

    return (os.environ if environ is None else environ).get(VARIABLE, "").strip().lower() in (
        TRUE_STRINGS
    )


class AutoResume:
    """Loads the latest checkpoint before the first batch, then fast-forwards each loader."""

    def __init__(self, accelerator: Accelerator) -> None:
        self.accelerator = accelerator
        self._checked = False
        #: per loader (by id): epochs still to iterate as empty, and a skip to give back
        self._pending: dict[int, int] = {}
        self._restore_skip: dict[int, tuple[Any, int]] = {}

    def iteration_starting(self, loader: Any) -> bool:
        """Called as ``loader`` starts an iteration; returns True when it must yield nothing
        (an epoch the checkpoint had finished)."""
        key = id(loader)
        if key in self._restore_skip:
            owner, skip = self._restore_skip.pop(key)
            owner.skip_batches = skip
        if not self._checked:
            self._checked = True
            self._load()
        remaining = self._pending.get(key)
        if remaining is None:
            return False
        if remaining > 0:
            self._pending[key] = remaining - 1
            return True
        del self._pending[key]
        resume = getattr(getattr(loader, "progress", None), "resume", None)
        if resume is not None and resume.batches:
            # continue the saved epoch after its trained batches (exactly, as skip_first_batches)
            self._restore_skip[key] = (loader, loader.skip_batches)
            loader.skip_batches = loader.skip_batches + resume.batches
        return False

    def _load(self) -> None:
        accelerator = self.accelerator
        checkpointer = accelerator._checkpointer
        if checkpointer.loaded_any or not checkpointer.has_complete_checkpoint():
            return
        accelerator.load_state()
        for loader in accelerator._prepared.dataloaders:
            progress = getattr(loader, "progress", None)
            if progress is not None:
                self._pending[id(loader)] = int(progress.epoch)


def watch(accelerator: Accelerator) -> AutoResume | None:
    """An :class:`AutoResume` for ``accelerator`` when the switch is on and there is a project
    folder with automatic checkpoint naming (``ACCEL_PROJECT_DIR`` gives one)."""
    if not requested():
        return None
    configuration = accelerator.project_configuration
    if not (configuration.project_dir and configuration.automatic_checkpoint_naming):
        raise ValueError(
            f"{VARIABLE} is on but the Accelerator has no project folder with automatic "
            "checkpoint naming to resume from; pass ProjectConfiguration(project_dir=..., "
            "automatic_checkpoint_naming=True), or launch with --project_dir DIR"
        )
    resumer = AutoResume(accelerator)
    accelerator.gradient_state._set_iteration_hook(resumer.iteration_starting)
    return resumer
