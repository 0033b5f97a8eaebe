"""The same run on another number of processes: ``ProjectConfiguration(keep_global_batch=True)``.

Every run of global_batch_job.py makes optimizer steps of 8 samples: 4 processes x batch 2 x
accumulation 1, 2 x 2 x 2, 2 x 4 x 1, 1 x 2 x 4, 1 x 8 x 1. A checkpoint of one layout resumed
with keep_global_batch on another must continue the same optimisation as the uninterrupted run
of the saved layout: the loss of every later optimizer step, the learning rate and the final
weights equal within float64 rounding. (Two fresh runs of different layouts differ: a prepared
scheduler advances ``num_processes`` times per optimizer step, Accelerate's rule.)

Tolerance: 1e-12, absolute, on losses (about 1) and weights (about 0.1 to 1). Each step's gradient
is the same sum of per-sample gradients in another order (inside the matmuls of a batch, across
accumulated batches, across the all-reduce of the processes), so a step differs by a few units in
the last place of float64 (2.2e-16 relative); AdamW divides by the running gradient scale, so the
differences grow no faster than the steps count (16 here). We measure at most 5e-16. 1e-12 keeps
three orders of magnitude of margin and is ten orders below what one misplaced batch does (the
run without the option, below, differs by more than 1e-3).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_core.checkpointing import global_batch
from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.manifest import Manifest
from accel_core.data_loader import prepare_data_loader
from accel_testing import run_workers

JOB = Path(__file__).parent / "global_batch_job.py"
TOLERANCE = 1e-12


def _job(nprocs: int, result: Path, accumulation: int, batch: int, *options: str) -> dict:
    result.parent.mkdir(parents=True, exist_ok=True)
    run_workers(
        nprocs,
        script=JOB,
        args=[str(result), "--accumulation", str(accumulation), "--batch", str(batch), *options],
    )
    return torch.load(result, weights_only=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """The uninterrupted runs, each saving checkpoints on the way (``ck_<step>`` beside it)."""
    root = tmp_path_factory.mktemp("global_batch")
    layouts = {
        "4x2x1": (4, 1, 2, ["--save-at", "5", "8"]),
        "2x2x2": (2, 2, 2, ["--save-at", "8"]),
        "2x4x1": (2, 1, 4, ["--save-at", "5"]),
    }
    found = {}
    for name, (nprocs, accumulation, batch, options) in layouts.items():
        result = root / name / "result.pt"
        found[name] = (result.parent, _job(nprocs, result, accumulation, batch, *options))
    return found


def _assert_same_run(resumed: dict, reference: dict, first_step: int) -> None:
    assert resumed["steps"] == reference["steps"] == 16
    assert sorted(resumed["losses"]) == list(range(first_step, 17))
    for step, loss in resumed["losses"].items():
        assert abs(loss - reference["losses"][step]) <= TOLERANCE, (step, loss)
    assert torch.allclose(resumed["weights"], reference["weights"], rtol=0, atol=TOLERANCE)
    assert resumed["lr"] == reference["lr"]  # the scheduler steps as often as in the saved run


processes = pytest.mark.multiprocess
slow = pytest.mark.slow


# (saved layout, checkpoint, processes now, batch now, accumulation expected now, first step)
CASES = [
    pytest.param("4x2x1", "ck_5", 2, 2, 2, 6, id="4-to-2-mid-epoch"),
    pytest.param("4x2x1", "ck_5", 1, 2, 4, 6, id="4-to-1-mid-epoch"),
    pytest.param("2x2x2", "ck_8", 4, 2, 1, 9, id="2-to-4-epoch-boundary"),
    pytest.param("2x4x1", "ck_5", 1, 8, 1, 6, id="2-to-1-with-batch-8-mid-epoch"),
]


@processes
@slow
@pytest.mark.parametrize(("saved", "checkpoint", "nprocs", "batch", "accumulation", "first"), CASES)
def test_resumed_on_other_processes_continues_the_same_run(
    runs, tmp_path, saved, checkpoint, nprocs, batch, accumulation, first
):
    folder, _ = runs[saved]
    resumed = _job(
        nprocs,
        tmp_path / "result.pt",
        1,  # the script's own setting: load_state changes it
        batch,
        "--resume-from",
        str(folder / checkpoint),
        "--keep",
    )
    assert resumed["accumulation"] == accumulation
    _assert_same_run(resumed, runs[saved][1], first)


@processes
@slow
def test_without_the_option_the_run_is_not_the_same(runs, tmp_path):
    folder, _ = runs["4x2x1"]
    resumed = _job(1, tmp_path / "result.pt", 1, 2, "--resume-from", str(folder / "ck_5"))
    reference = runs["4x2x1"][1]
    assert resumed["accumulation"] == 1  # unchanged: as before keep_global_batch existed
    differences = [abs(resumed["losses"][s] - reference["losses"][s]) for s in range(6, 17)]
    assert max(differences) > 1e-3


@processes
@slow
def test_a_global_batch_that_cannot_be_kept_is_refused_before_anything_changes(runs, tmp_path):
    folder, _ = runs["2x4x1"]
    result = tmp_path / "result.pt"
    options = ["--resume-from", str(folder / "ck_5"), "--keep", "--expect-refusal"]
    refused = _job(3, result, 1, 4, *options)
    assert refused["unchanged"]  # weights, random state, step, accumulation, loader, scheduler
    message = refused["message"]
    assert message is not None
    assert (
        "keep_global_batch can't resume" in message
        and "saved by 2 processes x 4 samples x 1 accumulation step(s) = 8 samples per "
        "optimizer step (data loader 0), and on 3 processes one round of batches is 12 samples "
        "(3 x 4), which doesn't divide 8. Resume on 1 or 2 process(es) with batches of 4"
        in message
    ), message
    assert "Nothing was loaded." in message


# -- the plan, without processes ----------------------------------------------------------------


def _loader(nprocs: int, batch: int, seedable: bool = True) -> DataLoader:
    dataset = TensorDataset(torch.arange(64.0))
    plain = DataLoader(dataset, batch_size=batch, shuffle=True)
    return prepare_data_loader(
        plain, num_processes=nprocs, process_index=0, use_seedable_sampler=seedable, data_seed=1
    )


def _manifest(world: int, total: int, batches: int, step: int = 0, **resume: object) -> Manifest:
    record = {
        "epoch": 0,
        "batches": batches,
        "sampler": "SeedableRandomSampler",
        "gradient_accumulation_steps": 1,
        "scheduler_steps_per_step": world,
        **resume,
    }
    entry = {"class": "DataLoaderShard", "epoch": 0, "batches": batches, "stateful": False}
    entry.update(total_batch_size=total, resume=record)
    return Manifest(world_size=world, step=step, iteration=0, strategy="ddp", dataloaders=[entry])


def _plan(
    manifest: Manifest | None, saved_world: int, loader: DataLoader, world: int, steps: int = 1
) -> global_batch.GlobalBatchPlan | None:
    return global_batch.plan(
        Path("ck"),
        manifest,
        saved_world,
        [loader],
        world_size=world,
        accumulation_steps=steps,
        handles_accumulation=False,
    )


def test_the_plan_maps_accumulation_step_and_position():
    plan = _plan(_manifest(4, 8, 5, step=5), 4, _loader(2, 2), 2)
    assert plan is not None
    assert (plan.accumulation_steps, plan.step(5), plan.batches(0, 5)) == (2, 10, 10)
    assert plan.scheduler_steps == 4


def test_nothing_to_change_gives_no_plan():
    assert _plan(_manifest(2, 4, 3), 2, _loader(2, 2), 2) is None


def test_checkpoints_without_a_record_load_as_before_on_their_processes_only():
    old = _manifest(4, 8, 5)
    del old.dataloaders[0]["resume"]
    assert _plan(old, 4, _loader(4, 2), 4) is None
    with pytest.raises(CheckpointError, match=r"records no gradient accumulation.*before 0\.4\.2"):
        _plan(old, 4, _loader(2, 2), 2)
    assert _plan(None, 2, _loader(2, 2), 2) is None
    with pytest.raises(CheckpointError, match="Hugging Face Accelerate checkpoint"):
        _plan(None, 4, _loader(2, 2), 2)


def test_a_checkpoint_inside_an_accumulation_cycle_is_refused():
    manifest = _manifest(2, 4, 3, step=3, gradient_accumulation_steps=2)
    with pytest.raises(CheckpointError, match=r"inside a gradient accumulation cycle.*step 3"):
        _plan(manifest, 2, _loader(1, 2), 1, steps=2)


def test_an_order_that_depends_on_the_processes_is_refused():
    manifest = _manifest(2, 4, 2, sampler="RandomSampler")
    with pytest.raises(CheckpointError, match=r"use_seedable_sampler=True"):
        _plan(manifest, 2, _loader(1, 4, seedable=False), 1)


def test_the_option_reads_the_environment_when_not_given(monkeypatch):
    monkeypatch.delenv(global_batch.ENVIRONMENT_VARIABLE, raising=False)
    assert not global_batch.enabled(None)
    monkeypatch.setenv(global_batch.ENVIRONMENT_VARIABLE, "yes")
    assert global_batch.enabled(None)
    assert not global_batch.enabled(False)
    monkeypatch.setenv(global_batch.ENVIRONMENT_VARIABLE, "sometimes")
    with pytest.raises(ValueError, match="ACCEL_KEEP_GLOBAL_BATCH='sometimes' is not valid"):
        global_batch.enabled(None)
