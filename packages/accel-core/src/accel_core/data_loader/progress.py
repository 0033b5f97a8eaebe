"""Where a prepared loader stands, for checkpoints: the epoch, the batches of it already yielded,
and the random states the epoch started from.

A loader and the copies :func:`~accel_core.skip_first_batches` makes of it share one
:class:`LoaderProgress`, so a checkpoint taken while a copy is iterating records the copy's
position, and the original loader's next epoch follows the copy's.

Resuming exactly mid-epoch needs more than the batch count: the epoch's permutation was drawn from
the synchronised generator as it was when the epoch began, and creating the iterator drew its
base seed from the global torch generator. ``load_state`` therefore leaves a
:class:`ResumePoint`; the next iteration restarts from those epoch-start states, positions itself
after the saved batches, and only then restores the random states of the checkpoint, so the
batches, the dropout masks and every later random number are the ones the uninterrupted run saw.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class ResumePoint:
    """Left by ``load_state`` on a loader whose checkpoint was taken mid-epoch."""

    epoch: int
    batches: int
    generator_state: torch.Tensor | None
    torch_state: torch.Tensor | None
    rng_states: dict[str, Any] | None = None


@dataclass
class LoaderProgress:
    """The position of a prepared loader (shared with its ``skip_first_batches`` copies)."""

    epoch: int = 0
    batches: int = 0
    in_epoch: bool = False
    generator_state: torch.Tensor | None = None
    torch_state: torch.Tensor | None = None
    resume: ResumePoint | None = field(default=None, repr=False)

    def start(self, skipped: int, generator: torch.Generator | None) -> None:
        """An iteration begins after ``skipped`` batches: remember the states it starts from."""
        self.in_epoch = True
        self.batches = skipped
        self.generator_state = generator.get_state() if generator is not None else None
        self.torch_state = torch.get_rng_state()

    def finish(self) -> None:
        """The iteration ran to its end: the next one is the next epoch."""
        self.epoch += 1
        self.batches = 0
        self.in_epoch = False

    def state_dict(self, generator: torch.Generator | None, at_end: bool) -> dict[str, Any]:
        """What a checkpoint stores (tensors and ints only: ``torch.load`` reads it safely).

        ``at_end``: the last batch of the epoch was yielded, so the position is the start of the
        next epoch (as the loader itself will see it once the loop ends).
        """
        if self.in_epoch and not at_end:
            return {
                "epoch": self.epoch,
                "batches": self.batches,
                "generator_state": self.generator_state,
                "torch_state": self.torch_state,
            }
        return {
            "epoch": self.epoch + 1 if self.in_epoch else self.epoch,
            "batches": 0,
            "generator_state": generator.get_state() if generator is not None else None,
            "torch_state": None,
        }

    def resume_here(
        self, skipped: int, what: str, generator: torch.Generator | None
    ) -> ResumePoint | None:
        """At the start of an iteration ``skipped`` batches in: take the pending resume point
        (:meth:`take_resume`) and, if this iteration resumes it, put the generators back where
        the saved epoch began."""
        resume = self.take_resume(skipped, what)
        if resume is not None:
            restore_epoch_start(resume, generator)
        return resume

    def take_resume(self, skipped: int, what: str) -> ResumePoint | None:
        """The pending resume point, if this iteration resumes it (``skipped`` batches in)."""
        resume, self.resume = self.resume, None
        if resume is None:
            return None
        if resume.epoch != self.epoch or resume.batches != skipped:
            warnings.warn(
                f"{what}: the checkpoint was taken after {resume.batches} batch(es) of epoch "
                f"{resume.epoch}, but this iteration starts after {skipped} batch(es) of epoch "
                f"{self.epoch}; it does not continue the saved run exactly. To resume exactly, "
                f"iterate accelerator.skip_first_batches(loader, {resume.batches}).",
                stacklevel=4,
            )
            return None
        return resume


def restore_epoch_start(resume: ResumePoint, generator: torch.Generator | None) -> None:
    """Put the generators back where the saved epoch began."""
    if resume.generator_state is not None and generator is not None:
        generator.set_state(resume.generator_state)
    if resume.torch_state is not None:
        torch.set_rng_state(resume.torch_state)


def restore_positioned(resume: ResumePoint | None) -> None:
    """Restore the checkpoint's random states once a resumed iteration is in place."""
    if resume is not None and resume.rng_states is not None:
        from accel_core.checkpointing import rng_states

        rng_states.restore(resume.rng_states)


class TracksProgress:
    """The ``iteration`` of a prepared loader that keeps a :class:`LoaderProgress`."""

    progress: LoaderProgress

    @property
    def iteration(self) -> int:
        """The epoch of the iteration in progress, or of the next one."""
        return self.progress.epoch

    @iteration.setter
    def iteration(self, epoch: int) -> None:
        self.progress.epoch = epoch
