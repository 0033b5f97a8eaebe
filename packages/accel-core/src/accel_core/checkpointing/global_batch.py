"""The same run on another number of processes: ``ProjectConfiguration(keep_global_batch=True)``.

A prepared loader deals the batches of the underlying batch sampler to the processes in turn
(or, with ``split_batches``, cuts each one into a slice per process), so one round of batches is
``total_batch_size`` consecutive samples of the epoch's order, and one optimizer step is
``gradient_accumulation_steps`` rounds: ``G = accumulation * total_batch_size`` consecutive
samples. That order depends on the seed and the epoch only (a seedable sampler, or the generator
shared by the processes, whose epoch-start state the checkpoint holds), not on the number of
processes. So a run resumed on other processes makes the same optimizer steps, sample for sample,
when its accumulation steps make the same ``G``::

    accumulation_now = G / total_batch_size_now     # 4 x 2 x 1 saved -> 2 x 2 x 2, 1 x 2 x 4

and its loaders start at the same sample (``batches * total_batch_size`` of them), which
``load_state`` leaves as the loader's resume point (``loader.progress.resume.batches``, for
``skip_first_batches``). The per-process batch size is the resumed script's own (by default the
same), so the accumulation steps are what changes; a script that also changes its batch size is
followed as long as the products still match. A prepared scheduler keeps advancing as many times
per optimizer step as in the saved run.

:func:`plan` checks all of it from the manifest before anything is loaded and raises a
:class:`~accel_core.checkpointing.errors.CheckpointError` naming the numbers when the global
batch can't be kept; it returns ``None`` when nothing has to change, so a checkpoint resumed on
the processes and settings it was saved with loads exactly as without the option.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data import IterableDataset, RandomSampler

from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.manifest import Manifest
from accel_core.data_loader.dispatcher import DataLoaderDispatcher
from accel_core.data_loader.samplers import SeedableRandomSampler, get_sampler

ENVIRONMENT_VARIABLE = "ACCEL_KEEP_GLOBAL_BATCH"

_WITHOUT = (
    "resume without keep_global_batch (ProjectConfiguration(keep_global_batch=False) or "
    f"{ENVIRONMENT_VARIABLE}=0)"
)
_TURN_OFF = f"or {_WITHOUT}"


def enabled(keep_global_batch: bool | None) -> bool:
    """The option as given, else ``ACCEL_KEEP_GLOBAL_BATCH`` (unset or empty: off)."""
    if keep_global_batch is not None:
        return bool(keep_global_batch)
    text = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if not text:
        return False
    from accel_ops import str_to_bool

    try:
        return bool(str_to_bool(text))
    except ValueError:
        raise ValueError(
            f"{ENVIRONMENT_VARIABLE}={text!r} is not valid; expected a boolean (1, true, yes, on "
            "or 0, false, no, off)."
        ) from None


def run_numbers(accumulation_steps: int, schedulers: list[Any]) -> dict[str, Any]:
    """What a checkpoint records of how this run makes an optimizer step (kept with each loader's
    summary in the manifest): the accumulation steps, and how many times a prepared scheduler
    advances per optimizer step (``None`` without one)."""
    steps = None
    for scheduler in schedulers:
        if hasattr(scheduler, "_num_processes") and getattr(scheduler, "step_with_optimizer", 1):
            steps = 1 if scheduler.split_batches else int(scheduler._num_processes)
            break
    return {
        "gradient_accumulation_steps": int(accumulation_steps),
        "scheduler_steps_per_step": steps,
    }


def sampler_name(loader: Any) -> str | None:
    """The class name of the loader's index sampler (``None`` without one)."""
    sampler = get_sampler(loader) if hasattr(loader, "batch_sampler") else None
    return type(sampler).__name__ if sampler is not None else None


@dataclass(frozen=True)
class GlobalBatchPlan:
    """How a checkpoint continues on this number of processes with the same global batch."""

    saved_world: int
    world_size: int
    saved_accumulation: int
    accumulation_steps: int
    global_batch: int
    #: per loader: samples in one round of batches (``total_batch_size``) when saved, and now
    totals: tuple[tuple[int, int], ...]
    scheduler_steps: int | None

    def step(self, saved_step: int) -> int:
        """``accelerator.step`` now: the same number of optimizer steps (``saved_step`` is a
        multiple of the saved accumulation steps, :func:`plan` checked it)."""
        return saved_step // self.saved_accumulation * self.accumulation_steps

    def batches(self, index: int, saved_batches: int) -> int:
        """Batches per process of loader ``index`` that hold the samples ``saved_batches`` held."""
        saved_total, total = self.totals[index]
        return saved_batches * saved_total // total

    def apply(self, gradient_state: Any, schedulers: list[Any]) -> None:
        """Set the accumulation steps and the schedulers' steps per optimizer step."""
        gradient_state.plugin_kwargs.update({"num_steps": self.accumulation_steps})
        if self.scheduler_steps is None:
            return
        for scheduler in schedulers:
            if hasattr(scheduler, "_num_processes") and not getattr(
                scheduler, "split_batches", False
            ):
                scheduler._num_processes = self.scheduler_steps

    def describe(self, folder: Path) -> str:
        """What :meth:`apply` and the loader positions change, for the log."""
        saved_total, total = self.totals[0]
        return (
            f"load_state: {folder} was saved by {_processes(self.saved_world)} with "
            f"gradient_accumulation_steps={self.saved_accumulation} and {saved_total} samples per "
            f"round of batches: {self.global_batch} samples per optimizer step. keep_global_batch: "
            f"on {_processes(self.world_size)} ({total} samples per round) "
            f"gradient_accumulation_steps is now {self.accumulation_steps}, so every optimizer "
            "step takes the same samples; the loaders resume at the same sample."
        )


def plan(
    folder: Path,
    manifest: Manifest | None,
    saved_world: int,
    loaders: list[Any],
    *,
    world_size: int,
    accumulation_steps: int,
    handles_accumulation: bool,
) -> GlobalBatchPlan | None:
    """The plan that keeps the global batch of the checkpoint in ``folder`` on ``world_size``
    processes whose loaders are ``loaders`` (every process calls it, with the same result).

    Returns ``None`` when the processes, the accumulation steps and every loader's
    ``total_batch_size`` are the saved ones (nothing to change), and for a checkpoint that
    records no global batch (Hugging Face Accelerate's, accel-core before 0.4.2) resumed on the
    processes that saved it.

    Raises:
        CheckpointError: naming the numbers, when the global batch can't be kept.
    """
    what = f"load_state: keep_global_batch can't resume {folder} on {_processes(world_size)}"
    saved = manifest.dataloaders if manifest is not None else []
    records = [entry.get("resume") for entry in saved]
    if manifest is None or any(not isinstance(r, dict) for r in records):
        if saved_world == world_size:
            return None
        source = (
            "it is a Hugging Face Accelerate checkpoint (no accel_checkpoint.json)"
            if manifest is None
            else "its manifest records no gradient accumulation steps (saved by accel-core "
            "before 0.4.2)"
        )
        raise CheckpointError(
            f"{what}: {source}, so the global batch of its optimizer steps is unknown. Resume it "
            f"on the {_processes(saved_world)} that saved it, {_TURN_OFF}."
        )
    if len(saved) != len(loaders):
        raise CheckpointError(
            f"{what}: it holds the positions of {len(saved)} data loader(s), and "
            f"{len(loaders)} are prepared. Prepare the same loaders, in the same order, as the "
            "saved run."
        )
    if not loaders:
        if saved_world == world_size:
            return None
        raise CheckpointError(
            f"{what}: keep_global_batch keeps the global batch of the prepared data loaders, and "
            "neither the saved run nor this one prepared any. Prepare the training loader, "
            f"{_TURN_OFF}."
        )
    saved_accumulation = _accumulation_of(records, what)
    totals: list[tuple[int, int]] = []
    wanted: set[int] = set()
    for index, (entry, loader) in enumerate(zip(saved, loaders, strict=True)):
        saved_total, total = entry.get("total_batch_size"), _total_batch_size(loader)
        if saved_total is None or total is None:
            raise CheckpointError(
                f"{what}: data loader {index} has no total_batch_size ("
                f"{'saved' if saved_total is None else 'now'}), so its global batch is unknown; "
                f"{_TURN_OFF}."
            )
        global_batch = saved_accumulation * saved_total
        if global_batch % total:
            split = bool(getattr(loader.batch_sampler, "split_batches", False))
            raise CheckpointError(
                _not_divisible(
                    what,
                    index,
                    saved_total,
                    total,
                    saved_world,
                    saved_accumulation,
                    world_size,
                    split,
                )
            )
        totals.append((int(saved_total), total))
        wanted.add(global_batch // total)
    if len(wanted) > 1:
        raise CheckpointError(
            f"{what}: its data loaders need different accumulation steps now ("
            + ", ".join(
                f"loader {i}: {saved_accumulation * s} / {t} = {saved_accumulation * s // t}"
                for i, (s, t) in enumerate(totals)
            )
            + "). Give the loaders the batch sizes of the saved run."
        )
    accumulation = wanted.pop()
    dealt_again = saved_world != world_size or any(s != t for s, t in totals)
    if not dealt_again and accumulation == accumulation_steps:
        return None
    if handles_accumulation and accumulation != accumulation_steps:
        raise CheckpointError(
            f"{what}: it needs gradient_accumulation_steps={accumulation} (the saved "
            f"{saved_accumulation} x {totals[0][0]} samples / {totals[0][1]} now), and this "
            "strategy's engine sets its accumulation steps itself. Set them to "
            f"{accumulation} in the engine's configuration, {_TURN_OFF}."
        )
    if manifest.step % saved_accumulation:
        raise CheckpointError(
            f"{what}: it was saved inside a gradient accumulation cycle (accelerator.step "
            f"{manifest.step}, gradient_accumulation_steps={saved_accumulation}), and the "
            "gradients accumulated so far are sums over each process's own batches, which "
            "can't be regrouped. Resume from a checkpoint taken after an optimizer step, "
            f"{_TURN_OFF}."
        )
    if dealt_again:
        for index, (record, loader) in enumerate(zip(records, loaders, strict=True)):
            _check_dealing(what, index, record, loader, saved_world, world_size, totals[index])
    scheduler_steps = next(
        (r["scheduler_steps_per_step"] for r in records if r.get("scheduler_steps_per_step")),
        None,
    )
    return GlobalBatchPlan(
        saved_world=saved_world,
        world_size=world_size,
        saved_accumulation=saved_accumulation,
        accumulation_steps=accumulation,
        global_batch=saved_accumulation * totals[0][0],
        totals=tuple(totals),
        scheduler_steps=scheduler_steps,
    )


def _accumulation_of(records: list[dict[str, Any]], what: str) -> int:
    values = {r.get("gradient_accumulation_steps") for r in records}
    if len(values) != 1 or not isinstance(next(iter(values)), int):
        raise CheckpointError(
            f"{what}: its manifest's accumulation steps are unreadable: {values}."
        )
    return int(values.pop())


def _check_dealing(
    what: str,
    index: int,
    record: dict[str, Any],
    loader: Any,
    saved_world: int,
    world_size: int,
    totals: tuple[int, int],
) -> None:
    """Refuse a loader whose samples can't be dealt again in the saved order and position."""
    kind = type(loader).__name__
    if isinstance(loader, DataLoaderDispatcher) or getattr(loader, "progress", None) is None:
        problem = f"is a {kind}; keep_global_batch deals the batches of sharded loaders again"
    elif isinstance(loader.dataset, IterableDataset):
        problem = "reads an IterableDataset; keep_global_batch re-deals map-style datasets only"
    elif getattr(loader, "use_stateful_dataloader", False):
        problem = (
            "is a StatefulDataLoader, whose saved position is rank 0's place in its own shard; "
            "prepare it with use_stateful_dataloader=False"
        )
    else:
        problem = _order_problem(record, loader, saved_world, world_size)
    if problem is None:
        batches = int(record.get("batches", 0))
        saved_total, total = totals
        if batches * saved_total % total == 0:
            return
        problem = (
            f"was saved after {batches} batch(es) per process of epoch {record.get('epoch')} "
            f"({batches * saved_total} samples), not a whole number of batch rounds of "
            f"{total} samples now"
        )
    raise CheckpointError(f"{what}: data loader {index} {problem}; {_TURN_OFF}.")


def _order_problem(
    record: dict[str, Any], loader: Any, saved_world: int, world_size: int
) -> str | None:
    """Why the loader can't draw the saved run's order of samples, or ``None``."""
    saved_sampler, sampler = record.get("sampler"), get_sampler(loader)
    name = type(sampler).__name__ if sampler is not None else None
    if saved_sampler != name:
        return (
            f"draws its samples with a {name}, and the saved run with a {saved_sampler}; prepare "
            "it as in the saved run"
        )
    if isinstance(sampler, RandomSampler) and not isinstance(sampler, SeedableRandomSampler):
        shared = getattr(loader, "synchronized_generator", None) is not None
        if saved_world == 1 or world_size == 1 or not shared:
            return (
                "shuffles with a RandomSampler, whose order comes from the global torch generator "
                "on 1 process and from a generator the processes share on more, so "
                f"{_processes(world_size)} can't draw the order of {_processes(saved_world)}. "
                "Prepare the loaders with DataLoaderConfiguration(use_seedable_sampler=True) "
                "in the run you save and in the one you resume"
            )
    return None


def _not_divisible(
    what: str,
    index: int,
    saved_total: int,
    total: int,
    saved_world: int,
    saved_accumulation: int,
    world_size: int,
    split: bool,
) -> str:
    global_batch = saved_accumulation * saved_total
    options = []
    if split:
        rounds = f"one batch of {total} split between the {world_size}"
        options.append(f"give the loader a batch size that divides {global_batch}")
    else:
        per_process = max(1, total // world_size)
        rounds = f"{world_size} x {per_process}"
        fits = [n for n in range(1, global_batch + 1) if global_batch % (n * per_process) == 0]
        if fits:
            options.append(f"resume on {_or(fits)} process(es) with batches of {per_process}")
        if global_batch % world_size == 0:
            options.append(
                f"give each of the {world_size} processes a batch size that divides "
                f"{global_batch // world_size}"
            )
    options.append(_WITHOUT)
    advice = ", ".join(options[:-1]) + ", or " + options[-1] if len(options) > 1 else options[0]
    return (
        f"{what}: it was saved by {_processes(saved_world)} x {saved_total // saved_world} "
        f"samples x {saved_accumulation} accumulation step(s) = {global_batch} samples per "
        f"optimizer step (data loader {index}), and on {_processes(world_size)} one round of "
        f"batches is {total} samples ({rounds}), which doesn't divide {global_batch}. "
        f"{advice[0].upper()}{advice[1:]}. Nothing was loaded."
    )


def _total_batch_size(loader: Any) -> int | None:
    try:
        return int(loader.total_batch_size)
    except (AttributeError, TypeError, NotImplementedError):
        return None


def _processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"


def _or(values: list[int]) -> str:
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
