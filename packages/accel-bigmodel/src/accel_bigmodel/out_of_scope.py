"""The error raised when a Hugging Face Accelerate big-model feature accel does not run is used.

The names of those features (bitsandbytes quantization, pipeline-parallel inference) exist so
that ported code imports; calling them raises :class:`OutOfScopeError`, which names the feature
and what to use instead.
"""

from __future__ import annotations


class OutOfScopeError(NotImplementedError):
    """A Hugging Face Accelerate feature that accel-bigmodel does not run."""


def out_of_scope(feature: str, instead: str) -> OutOfScopeError:
    """The error for using ``feature``; ``instead`` says what to do (a sentence, no full stop)."""
    return OutOfScopeError(f"{feature} is out of scope in accel, which does not run it; {instead}.")
