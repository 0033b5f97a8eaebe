"""The error raised when a Hugging Face Accelerate feature that accel does not run is used.

The names of those features (FP8 recipes, bitsandbytes, Megatron-LM, pipeline inference, tensor
and context parallelism, ...) exist in every accel package so that ported code imports; using one
raises :class:`OutOfScopeError`, which names the feature and what to use instead. One class for
all packages, so ``except OutOfScopeError`` catches each of them.
"""

from __future__ import annotations


class OutOfScopeError(NotImplementedError):
    """A Hugging Face Accelerate feature that accel does not run."""


def out_of_scope(feature: str, instead: str) -> OutOfScopeError:
    """The error for using ``feature``; ``instead`` says what to do (a sentence, no full stop)."""
    return OutOfScopeError(f"{feature} is out of scope in accel, which does not run it; {instead}.")
