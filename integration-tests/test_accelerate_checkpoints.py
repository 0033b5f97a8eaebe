"""Checkpoints move between Hugging Face Accelerate 1.15 and accel, in both directions.

For 1 and for 2 processes, one chain of three jobs (``scripts/checkpoint_workload.py`` run by
``scripts/accel_checkpoint_job.py`` and ``scripts/accelerate_checkpoint_job.py``):

1. accel trains and calls ``save_state(first)``;
2. Accelerate, from other seeds, calls ``load_state(first)``, records what it got, trains on and
   calls ``save_state(second)``;
3. accel, from other seeds again, calls ``load_state(second)`` and records what it got.

Each load is compared exactly (``torch.equal``) with what the saving job had: model weights,
optimizer and scheduler states, the registered object, ``accelerator.step``, and the
torch/python/numpy numbers each rank draws right after the save and right after the load. (One
chain of three jobs instead of two pairs saves a job, about 4 s, per process count.)

Accelerate 1.15 writes no ``sampler.bin`` for a map-style dataset (only for an
``IterableDatasetShard``), so its job pickles the loader's ``SeedableRandomSampler`` the way
``save_accelerator_state`` does and the test puts it into ``second``: our ``load_state`` must take
its epoch and seed from it without importing ``accelerate``. No scaler: neither library makes a
``GradScaler`` on CPU (both train ``mixed_precision="fp16"`` in fp32 there).

Accelerate runs in its own interpreter, named by ``ACCEL_TEST_HF_PYTHON`` (``nox -s integration``
builds one and sets it); without it the tests skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from test_end_to_end import accel_command

from accel_testing import free_port

HF_PYTHON = "ACCEL_TEST_HF_PYTHON"
SCRIPTS = Path(__file__).parent / "scripts"
JOBS = {
    "accelerate": SCRIPTS / "accelerate_checkpoint_job.py",
    "accel": SCRIPTS / "accel_checkpoint_job.py",
}
#: A launcher's variables, kept out of a job's environment (its own launcher sets them).
_LAUNCH_VARIABLES = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT",
}  # fmt: skip
#: Per job; the three jobs of a chain stay within pytest's 300 s.
JOB_TIMEOUT = 90
PROCESSES = [1, 2]


def accelerate_files(processes: int) -> list[str]:
    """What Accelerate 1.15's ``save_state`` writes for the job (one model, optimizer, scheduler,
    registered object and map-style loader)."""
    ranks = [f"random_states_{rank}.pkl" for rank in range(processes)]
    names = ["custom_checkpoint_0.pkl", "model.safetensors", "optimizer.bin", "scheduler.bin"]
    return sorted(names + ranks)


@pytest.fixture(scope="module")
def hf_python() -> str:
    python = os.environ.get(HF_PYTHON)
    if not python:
        pytest.skip(
            f"{HF_PYTHON} is not set: point it at a Python with accelerate==1.15.0 and "
            f"torch==2.13.0 ({HF_PYTHON}=/path/to/venv/bin/python pytest {Path(__file__).name}), "
            "or run `nox -s integration`, which builds that venv and sets it."
        )
    return python


def run_job(
    library: str, *, processes: int, records: Path, name: str, hf_python: str, options: tuple
) -> list[dict[str, Any]]:
    """Run one library's job on ``processes`` processes; return each rank's record."""
    script = str(JOBS[library])
    python = hf_python if library == "accelerate" else sys.executable
    if processes == 1:
        command = [python, script]
    elif library == "accelerate":
        command = [
            python, "-m", "torch.distributed.run", "--nnodes", "1",
            "--nproc_per_node", str(processes), "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), script,
        ]  # fmt: skip
    else:
        command = [*accel_command(), "launch", "--num_processes", str(processes), script]
    env = {key: value for key, value in os.environ.items() if key not in _LAUNCH_VARIABLES}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [*command, str(records), name, *options],
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert done.returncode == 0, (
        f"{library} job {name!r} ({' '.join(options)}) on {processes} process(es) exited "
        f"{done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    found = [torch.load(records / f"{name}_{rank}.pt") for rank in range(processes)]
    assert [record["world_size"] for record in found] == [processes] * processes, name
    return found


@dataclass
class Chain:
    processes: int
    accel_saved: list[dict[str, Any]]
    accelerate_loaded: list[dict[str, Any]]
    accelerate_saved: list[dict[str, Any]]
    accel_loaded: list[dict[str, Any]]
    written_by_accel: list[str]
    written_by_accelerate: list[str]
    weight_keys_by_accel: list[str]
    weight_keys_by_accelerate: list[str]


@pytest.fixture(scope="module", params=PROCESSES, ids=[f"{n}-process" for n in PROCESSES])
def chain(request, hf_python, tmp_path_factory) -> Chain:
    """accel saves, Accelerate loads and saves, accel loads (see the module docstring)."""
    processes = request.param
    root = tmp_path_factory.mktemp(f"chain-{processes}")
    first, second, records = root / "first", root / "second", root / "records"
    records.mkdir()
    run = partial(run_job, processes=processes, records=records, hf_python=hf_python)
    accel_first = run("accel", name="accel-save", options=("--seed", "0", "--save", str(first)))
    written_by_accel = sorted(path.name for path in first.iterdir())
    accelerate = run(
        "accelerate",
        name="accelerate",
        options=("--seed", "10", "--load", str(first), "--save", str(second)),
    )
    written_by_accelerate = sorted(path.name for path in second.iterdir())
    shutil.copy(records / "sampler.bin", second / "sampler.bin")
    accel_last = run("accel", name="accel-load", options=("--seed", "20", "--load", str(second)))
    return Chain(
        processes,
        accel_saved=[record["saved"] for record in accel_first],
        accelerate_loaded=[record["loaded"] for record in accelerate],
        accelerate_saved=[record["saved"] for record in accelerate],
        accel_loaded=[record["loaded"] for record in accel_last],
        written_by_accel=written_by_accel,
        written_by_accelerate=written_by_accelerate,
        weight_keys_by_accel=weight_keys(first),
        weight_keys_by_accelerate=weight_keys(second),
    )


def weight_keys(checkpoint: Path) -> list[str]:
    with safe_open(checkpoint / "model.safetensors", framework="pt") as weights:
        return sorted(weights.keys())


def assert_same(got: Any, want: Any, where: str) -> None:
    """``got`` equals ``want`` exactly: tensors by ``torch.equal`` and dtype, containers deeply."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got).__name__}, expected a tensor"
        assert got.dtype == want.dtype and torch.equal(got, want), f"{where}: {got} != {want}"
    elif isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {type(got).__name__}, expected a dict"
        assert sorted(map(str, got)) == sorted(map(str, want)), f"{where}: keys differ"
        for key in want:
            assert_same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{where}: {got} != {want}"
        for index, (item, expected) in enumerate(zip(got, want, strict=True)):
            assert_same(item, expected, f"{where}[{index}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def assert_restored(saved: list[dict[str, Any]], loaded: list[dict[str, Any]]) -> None:
    """Every rank of the loading job got what the same rank of the saving job had."""
    assert saved[0]["step"] > 0 and saved[0]["scheduler"]["last_epoch"] > 0
    if len(saved) > 1:
        first, second = (record["draws"]["torch"] for record in saved)
        assert not torch.equal(first, second), "the ranks' random streams should differ"
    for rank, (want, got) in enumerate(zip(saved, loaded, strict=True)):
        weights = want["model"]
        before = got["before"]["model"]
        assert any(not torch.equal(before[key], weights[key]) for key in weights), (
            "the loading job started from the saved weights, so loading them proves nothing"
        )
        assert_same(got["model"], weights, f"rank {rank}: model")
        assert_same(got["optimizer"], want["optimizer"], f"rank {rank}: optimizer")
        assert_same(got["scheduler"], want["scheduler"], f"rank {rank}: scheduler")
        # Registered objects are written by the main process only.
        assert_same(got["custom"], saved[0]["custom"], f"rank {rank}: registered object")
        assert got["step"] == want["step"], f"rank {rank}: accelerator.step"
        assert_same(got["draws"], want["draws"], f"rank {rank}: random numbers after load")


@pytest.mark.multiprocess
def test_accelerate_loads_what_accel_saved(chain):
    written = chain.written_by_accel
    assert set(accelerate_files(chain.processes)) <= set(written), written
    assert "accel_checkpoint.json" in written, written  # which Accelerate has to ignore
    # Keys of the model inside DDP, as Accelerate writes them and (strictly) loads them.
    assert chain.weight_keys_by_accel == sorted(chain.accel_saved[0]["model"])
    assert_restored(chain.accel_saved, chain.accelerate_loaded)


@pytest.mark.multiprocess
def test_accel_loads_what_accelerate_saved(chain):
    # No sampler.bin: Accelerate 1.15 pickles the sampler only for an IterableDatasetShard.
    assert chain.written_by_accelerate == accelerate_files(chain.processes)
    assert chain.weight_keys_by_accelerate == sorted(chain.accelerate_saved[0]["model"])
    assert_restored(chain.accelerate_saved, chain.accel_loaded)
    pickled = chain.accelerate_saved[0]["pickled_sampler"]
    expected_sampler = {"epoch": pickled["epoch"], "initial_seed": pickled["initial_seed"]}
    for rank, record in enumerate(chain.accel_loaded):
        assert record["accelerate_imported"] == [], f"rank {rank} imported accelerate"
        assert record["before"]["sampler"] != expected_sampler, f"rank {rank}"
        assert record["sampler"] == expected_sampler, f"rank {rank}: sampler.bin not restored"
        assert record["loader_epoch"] == pickled["epoch"], f"rank {rank}: loader epoch"
        assert record["order"] == pickled["order"], f"rank {rank}: sampler order"
