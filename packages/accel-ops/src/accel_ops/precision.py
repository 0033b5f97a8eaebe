"""Bringing half-precision outputs back to float32."""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from typing import Any

import torch

from accel_ops.tree import recursively_apply


def _is_half(tensor: object) -> bool:
    return getattr(tensor, "dtype", None) in (torch.float16, torch.bfloat16)


def convert_to_fp32(tensor: Any) -> Any:
    """Convert every float16/bfloat16 tensor of ``tensor`` to float32; others are unchanged."""
    return recursively_apply(lambda t: t.float(), tensor, test_type=_is_half)


class ConvertOutputsToFp32:
    """Wraps a forward function so that its half-precision outputs come back in float32.

    Not picklable on purpose: unwrap the model (``Accelerator.unwrap_model``) before pickling.
    """

    def __init__(self, model_forward: Callable[..., Any]) -> None:
        self.model_forward = model_forward
        functools.update_wrapper(self, model_forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return convert_to_fp32(self.model_forward(*args, **kwargs))

    def __getstate__(self) -> Any:
        raise pickle.PicklingError(
            "Cannot pickle a model whose forward converts outputs to fp32 (mixed precision); "
            "unwrap it with Accelerator.unwrap_model(model) before pickling."
        )


def convert_outputs_to_fp32(model_forward: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator form of :class:`ConvertOutputsToFp32`; ``forward.__wrapped__`` is the wrapper."""
    wrapper = ConvertOutputsToFp32(model_forward)

    def forward(*args: Any, **kwargs: Any) -> Any:
        return wrapper(*args, **kwargs)

    forward.__wrapped__ = wrapper  # type: ignore[attr-defined]
    return forward
