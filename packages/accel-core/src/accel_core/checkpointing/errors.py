"""The error raised when a checkpoint can't be written or read as asked."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, corrupt, or doesn't match what is being restored.

    The message names the folder or file, the key, and what was expected.
    """
