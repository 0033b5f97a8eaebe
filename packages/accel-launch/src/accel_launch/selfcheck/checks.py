"""What a check is, what it reports, and how one runs: the vocabulary of every check module.

A check is a function of no arguments that compares what it got with a value known in advance.
It returns a short description of what it compared (``PASS``), raises :class:`CheckFailed` with
expected vs got (``FAIL``) or :class:`CheckSkipped` with why (``SKIP``). :func:`run_check` turns
that into a :data:`Result`; any other exception is a ``FAIL`` too, and the other checks still run.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch

#: (name, check): a check returns what it compared, or raises CheckFailed / CheckSkipped.
Check = tuple[str, Callable[[], str]]
#: (name, "PASS" | "FAIL" | "SKIP", detail) as rank 0 prints it.
Result = tuple[str, str, str]


class CheckFailed(AssertionError):
    """A check's result differs from the known value; the message says what, expected and got."""

    def __init__(self, what: str, expected: object, got: object) -> None:
        super().__init__(f"{what}: expected {expected}, got {got}")


class CheckSkipped(Exception):
    """A check that cannot run here; the message says why and what to install."""


@dataclass(frozen=True)
class Job:
    """This process's place in the job, and what the job was asked to be."""

    rank: int
    world: int
    expected_world: int
    asked_by: str
    #: where the tensors of torch.distributed's own collectives live (CUDA with nccl)
    device: torch.device
    #: added to the reference weights of the training check (only tests set it, to see it fail)
    perturb_reference: float = 0.0


def expect_equal(what: str, expected: object, got: object) -> None:
    """Raise :class:`CheckFailed` unless ``got == expected`` (tensors: shape, dtype and values)."""
    if isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor):
        got = got.cpu()
        same = got.shape == expected.shape and got.dtype == expected.dtype
        if not (same and torch.equal(got, expected)):
            raise CheckFailed(what, _show(expected), _show(got))
    elif got != expected:
        raise CheckFailed(what, expected, got)


def _show(tensor: torch.Tensor) -> str:
    return f"{tensor.tolist()} ({str(tensor.dtype).removeprefix('torch.')})"


def run_check(name: str, check: Callable[[], str]) -> Result:
    """Run one check: PASS with what it compared, FAIL with expected vs got, or SKIP with why."""
    try:
        return (name, "PASS", check())
    except CheckSkipped as skipped:
        return (name, "SKIP", str(skipped))
    except Exception as error:  # a failed check is reported, the others still run
        detail = (
            str(error) if isinstance(error, CheckFailed) else f"{type(error).__name__}: {error}"
        )
        if os.environ.get("ACCEL_DEBUG_MODE", "").lower() in ("1", "true", "yes", "on"):
            detail += "\n" + traceback.format_exc()
        return (name, "FAIL", detail)
