"""Accelerator methods of features that come in a later release (checkpointing, trackers).

They exist so that a ported script fails at the call with a message saying what to use instead,
not with an AttributeError.
"""

from __future__ import annotations

from typing import Any

import torch

_NOT_YET = (
    "{what} is not available in accel-core 0.1.0: checkpointing and experiment trackers come in a "
    "later release. Until then save with accelerator.get_state_dict(model) and accelerator.save()."
)


def _not_yet(what: str) -> NotImplementedError:
    return NotImplementedError(_NOT_YET.format(what=what))


class PendingFeaturesMixin:
    """Checkpointing and tracker methods that raise ``NotImplementedError`` with the way out."""

    def save_state(self, output_dir: str | None = None, **kwargs: Any) -> str:
        """Not available yet (checkpointing comes in a later release)."""
        raise _not_yet("Accelerator.save_state")

    def load_state(self, input_dir: str | None = None, **kwargs: Any) -> None:
        """Not available yet (checkpointing comes in a later release)."""
        raise _not_yet("Accelerator.load_state")

    def save_model(self, model: torch.nn.Module, save_directory: str, **kwargs: Any) -> None:
        """Not available yet (checkpointing comes in a later release)."""
        raise _not_yet("Accelerator.save_model")

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Not available yet (checkpointing comes in a later release)."""
        raise _not_yet("Accelerator.register_for_checkpointing")

    def init_trackers(self, project_name: str, config: Any = None, init_kwargs: Any = None) -> None:
        """Not available yet (experiment trackers come in a later release)."""
        raise _not_yet("Accelerator.init_trackers")

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: Any = None) -> None:
        """Not available yet (experiment trackers come in a later release)."""
        raise _not_yet("Accelerator.log")

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """Not available yet (experiment trackers come in a later release)."""
        raise _not_yet("Accelerator.get_tracker")
