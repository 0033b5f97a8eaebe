"""transformers' ``Trainer``, a peft LoRA model and trl's ``SFTTrainer`` under accel's
``accelerate`` alias, compared with Hugging Face Accelerate 1.15 running the same job file
(``jobs/trainer_job.py``; see its docstring for the phases).

Everything is compared EXACTLY (tolerance 0.0: ``==`` on the logged floats, ``torch.equal`` on
tensors): both sides run the same transformers, peft and trl on the same torch, so every
difference is a difference in what the ``accelerate`` they import does (data order, sharding,
loss scaling across processes, gradient synchronisation, random states, checkpoint contents).

One chain of three jobs per process count (module-scoped fixture; the later jobs resume from the
checkpoints of the earlier ones, so each checkpoint crosses between the libraries once in each
direction):

=========  =====================================================  =============================
processes  job (opt-in or launcher)                               phases
=========  =====================================================  =============================
1          accel, ``ACCEL_AS_ACCELERATE=1``                       full, lora, sft
1          Accelerate                                             full, lora, sft, resume and
                                                                  lora-resume from accel's
                                                                  ``checkpoint-4``
1          accel, ``accel.as_accelerate.install()``               resume and lora-resume from
                                                                  Accelerate's ``checkpoint-4``
2          accel, ``accel launch --as-accelerate``                full, lora, sft
2          Accelerate, ``accelerate launch --multi_gpu``          as for 1 process
2          accel, ``torchrun`` with ``ACCEL_AS_ACCELERATE=1``     full, resume and lora-resume
                                                                  from Accelerate's
=========  =====================================================  =============================

On 2 processes the 26 training texts leave an uneven last batch each epoch (the loader pads it
with repeated samples; with ``gradient_accumulation_steps=2`` the epoch ends inside an
accumulation window), and the 13 evaluation texts leave 1 for the last step of 4:
``compute_metrics`` must see exactly 13 samples.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from ecosystem_support import (
    EVAL_TEXTS,
    INSTALL_THEN_RUN,
    JOBS,
    executable,
    from_accel,
    job_environment,
    run,
)
from safetensors.torch import load_file

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = str(JOBS / "trainer_job.py")
STEPS = 8
CHECKPOINT = "checkpoint-4"
#: Entries of the resumed runs' log history: the uninterrupted run's, without its summary
#: (``train_loss`` averages only the resumed steps) and the ``evaluate()`` after training.
RESUMED_ENTRIES = {"full": STEPS + 2, "lora": STEPS}


@dataclass
class Job:
    """One job's output folder."""

    name: str
    out: Path

    def has(self, phase: str) -> bool:
        return (self.out / f"{phase}.json").exists()

    def result(self, phase: str) -> dict[str, Any]:
        return json.loads((self.out / f"{phase}.json").read_text())

    def weights(self, phase: str) -> dict[str, torch.Tensor]:
        return load_file(self.out / f"{phase}.safetensors")


@dataclass
class Chain:
    processes: int
    accel_first: Job
    accelerate: Job
    accel_last: Job

    @property
    def accel_jobs(self) -> list[Job]:
        return [self.accel_first, self.accel_last]


def untimed(history: list[dict]) -> list[dict]:
    """A log history without its timings (run time, samples per second)."""
    timing = ("runtime", "per_second", "preparation_time")
    return [
        {k: v for k, v in entry.items() if not any(t in k for t in timing)} for entry in history
    ]


def assert_same_tensors(mine: dict, theirs: dict, what: str) -> None:
    assert sorted(mine) == sorted(theirs), what
    differ = {
        name: float((mine[name].double() - theirs[name].double()).abs().max())
        for name in mine
        if not torch.equal(mine[name], theirs[name])
    }
    assert not differ, f"{what}: tensors differ (largest absolute difference): {differ}"


def resumed_from(out: Path) -> list[str]:
    """The job phases that resume the full and the LoRA run from ``checkpoint-4`` in ``out``."""
    return [f"resume={out / 'full' / CHECKPOINT}", f"lora-resume={out / 'lora' / CHECKPOINT}"]


@pytest.fixture(scope="module", params=[1, 2], ids=["1-process", "2-processes"])
def chain(request, assets, hf_python, tmp_path_factory) -> Chain:
    processes = request.param
    root = tmp_path_factory.mktemp(f"trainer-{processes}")
    first, second, third = root / "accel-first", root / "accelerate", root / "accel-last"
    hf_env = job_environment(root, alias=False)
    if processes == 1:
        launch_first = [sys.executable, SCRIPT]
        launch_hf = [hf_python, SCRIPT]
        launch_last = [sys.executable, "-c", INSTALL_THEN_RUN, SCRIPT]
        env_first = env_last = job_environment(root, alias=True)
        phases_last = []
    else:
        accel = executable(sys.executable, "accel")
        launch_first = [accel, "launch", "--as-accelerate", "--num_processes", "2", SCRIPT]
        env_first = job_environment(root, alias=False)  # the launcher opts its workers in
        accelerate = executable(hf_python, "accelerate")
        launch_hf = [
            accelerate, "launch", "--multi_gpu", "--num_processes", "2",
            "--main_process_port", "0", SCRIPT,
        ]  # fmt: skip
        torchrun = executable(sys.executable, "torchrun")
        launch_last = [torchrun, "--standalone", "--nproc_per_node", "2", SCRIPT]
        env_last = job_environment(root, alias=True)
        phases_last = ["full"]
    what = f"{processes}-process job"
    run([*launch_first, str(assets), str(first), "full", "lora", "sft"], env_first, f"accel {what}")
    hf_phases = ["full", "lora", "sft", *resumed_from(first)]
    run([*launch_hf, str(assets), str(second), *hf_phases], hf_env, f"Accelerate {what}")
    last_phases = [*phases_last, *resumed_from(second)]
    run([*launch_last, str(assets), str(third), *last_phases], env_last, f"accel {what} (last)")
    return Chain(
        processes,
        accel_first=Job("accel", first),
        accelerate=Job("accelerate", second),
        accel_last=Job("accel (last)", third),
    )


def test_each_side_ran_its_library(chain):
    """The alias took effect in every accel job (a real accelerate is installed beside accel), and
    each job ran on the expected number of processes."""
    for job in [*chain.accel_jobs, chain.accelerate]:
        for path in sorted(job.out.glob("*.json")):
            result = json.loads(path.read_text())
            assert result["world_size"] == chain.processes, (job.name, path.name)
            if job is chain.accelerate:
                assert result["accelerator"] == "accelerate.accelerator.Accelerator", path
            else:
                assert from_accel(result["accelerator"]), path


def test_trainer_matches_accelerate(chain):
    """Per-step losses, gradient norms and learning rates, the evaluations at steps 4 and 8 and
    after training, and the final weights: equal to Accelerate's."""
    theirs = chain.accelerate.result("full")
    for job in chain.accel_jobs:
        if not job.has("full"):
            continue
        mine = job.result("full")
        assert mine["log_history"] == theirs["log_history"], job.name
        assert mine["metrics"] == theirs["metrics"], job.name
        assert_same_tensors(job.weights("full"), chain.accelerate.weights("full"), job.name)


def test_evaluation_sees_every_sample_once(chain):
    """``compute_metrics`` gets the 13 evaluation samples, no repeated padding sample."""
    for job in [*chain.accel_jobs, chain.accelerate]:
        if not job.has("full"):
            continue
        result = job.result("full")
        evaluations = [entry for entry in result["log_history"] if "eval_loss" in entry]
        assert [entry["step"] for entry in evaluations] == [4, 8, 8], job.name
        assert [entry["eval_samples"] for entry in evaluations] == [EVAL_TEXTS] * 3, job.name
        assert result["metrics"]["eval_samples"] == EVAL_TEXTS, job.name


@pytest.mark.parametrize("phase", ["full", "lora"])
def test_checkpoints_match_accelerate(chain, phase):
    """The weights in the ``Trainer``'s checkpoints at steps 4 and 8 (the model, or the LoRA
    adapter), and their ``trainer_state.json`` log history."""
    file = "model.safetensors" if phase == "full" else "adapter_model.safetensors"
    for step in (4, 8):
        folder = f"checkpoint-{step}"
        theirs = chain.accelerate.out / phase / folder
        mine = chain.accel_first.out / phase / folder
        what = f"{phase}/{folder}"
        assert_same_tensors(load_file(mine / file), load_file(theirs / file), what)
        states = [json.loads((path / "trainer_state.json").read_text()) for path in (mine, theirs)]
        assert untimed(states[0]["log_history"]) == untimed(states[1]["log_history"]), what


@pytest.mark.parametrize("phase", ["full", "lora"])
def test_resume_across_libraries(chain, phase):
    """Resumed from the other library's ``checkpoint-4`` to step 8 (accel's checkpoint by
    Accelerate, Accelerate's by accel): the final weights are those of the uninterrupted run, and
    so is the log history up to the last step."""
    resumed = "resume" if phase == "full" else "lora-resume"
    uninterrupted = chain.accelerate.result(phase)["log_history"][: RESUMED_ENTRIES[phase]]
    for job in (chain.accelerate, chain.accel_last):
        what = f"{job.name} resumed {phase}"
        assert_same_tensors(job.weights(resumed), chain.accelerate.weights(phase), what)
        history = job.result(resumed)["log_history"]
        assert [entry for entry in history if "train_loss" not in entry] == uninterrupted, what


def test_lora_matches_accelerate(chain):
    """peft LoRA: per-step logs and the final adapter weights."""
    theirs = chain.accelerate.result("lora")
    mine = chain.accel_first.result("lora")
    assert mine["log_history"] == theirs["log_history"]
    assert_same_tensors(chain.accel_first.weights("lora"), chain.accelerate.weights("lora"), "lora")


def test_sft_trainer_matches_accelerate(chain):
    """trl's SFTTrainer (bf16 autocast and gradient checkpointing, its defaults): per-step logs
    (loss, entropy, token accuracy, token count) and the final weights."""
    theirs = chain.accelerate.result("sft")
    mine = chain.accel_first.result("sft")
    assert mine["log_history"] == theirs["log_history"]
    assert_same_tensors(chain.accel_first.weights("sft"), chain.accelerate.weights("sft"), "sft")


@pytest.mark.parametrize("phase", ["full", "sft"])
def test_save_model_reads_back(chain, phase):
    """``save_model`` then ``from_pretrained`` gives the trained weights back (checked in the job,
    on each side), and accel's saved file holds Accelerate's tensors."""
    for job in [chain.accel_first, chain.accelerate]:
        assert job.result(phase)["read_back_equal"] is True, job.name
    saved = [
        load_file(job.out / phase / "final" / "model.safetensors")
        for job in (chain.accel_first, chain.accelerate)
    ]
    assert_same_tensors(saved[0], saved[1], f"{phase}/final/model.safetensors")
