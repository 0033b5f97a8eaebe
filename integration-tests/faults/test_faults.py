"""Faults, for real (``nox -s faults``): restarts, preemption and lost machines.

Every case launches ``train_job.py`` (a user's script: project folder, automatic checkpoint
naming, ``load_state()`` at start) through ``accel launch`` on 2 CPU processes, breaks it from
outside or at a chosen step, and compares the final weights with those of the same job run
without a fault: equal bit for bit (``torch.equal``). Two machines are two launchers on loopback,
each with its own elastic agent, meeting in a c10d rendezvous; a machine is lost by SIGKILL of its
launcher (its workers die with it).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

JOB = Path(__file__).with_name("train_job.py")
PREEMPTED = 75
#: How often each restart case runs in a row (``flake-check`` runs the file under load too).
REPEATS = int(os.environ.get("ACCEL_FAULT_REPEATS", "2"))


def _accel() -> list[str]:
    script = Path(sys.executable).parent / "accel"
    return [str(script)] if script.exists() else [shutil.which("accel") or "accel"]


def _environment(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACCEL_", "RANK", "WORLD_", "TORCHELASTIC_", "SLURM_"))
    }
    # the job's steps take milliseconds: the ranks vote at every backward pass (not every 0.2 s),
    # so that a signal is acted on within the job's 36 steps
    quick = {"ACCEL_PREEMPTION_VOTE_SECONDS": "0"}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **quick, **extra}


def _launch(
    project: Path,
    *job_args: str,
    launch_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    command = [*_accel(), "launch", "--quiet", "--cpu", "--num_processes", "2", *launch_args]
    command += [str(JOB), "--project", str(project), "--result", str(project / "result.pt")]
    return subprocess.run(
        [*command, *job_args],
        env=_environment(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _weights(project: Path) -> dict[str, torch.Tensor]:
    return torch.load(project / "result.pt")["weights"]


def _assert_same_weights(project: Path, reference: dict[str, torch.Tensor]) -> None:
    weights = _weights(project)
    assert weights.keys() == reference.keys()
    for name, tensor in reference.items():
        assert torch.equal(weights[name], tensor), name


def _steps(project: Path, rank: int) -> list[tuple[int, str]]:
    lines = (project / f"steps_{rank}.log").read_text().split()
    return [(int(step), attempt) for step, attempt in zip(lines[::2], lines[1::2], strict=True)]


def _checkpoint_step(folder: Path) -> int:
    """The job's own step counter saved in ``folder`` (its registered object)."""
    manifest = json.loads((folder / "accel_checkpoint.json").read_text())
    assert "custom_checkpoint_0.pkl" in manifest["files"]
    state = torch.load(folder / "custom_checkpoint_0.pkl", weights_only=True)
    return int(state["step"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """The final weights of the job run on 2 processes without any fault."""
    project = tmp_path_factory.mktemp("uninterrupted")
    result = _launch(project)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _steps(project, 0)[-1] == (36, "0")
    return _weights(project)


@pytest.mark.parametrize("run", range(REPEATS))
@pytest.mark.parametrize("backend", ["static", "c10d"])
def test_restart_after_a_worker_is_killed_resumes_bit_identical(
    backend: str, run: int, reference: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    # rank 1 SIGKILLs itself at step 10 (checkpoint at 8): the agent restarts the group, which
    # forms afresh (before: "connectFullMesh failed ... Connection refused" or a silent hang)
    launch = ("--rdzv_backend", backend, "--max_restarts", "1")
    result = _launch(tmp_path, "--die-at", "10", launch_args=launch)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "connectFullMesh" not in result.stderr
    # attempt 0 ran steps 1..10; attempt 1 resumed from the checkpoint of step 8
    expected = [(step, "0") for step in range(1, 11)] + [(step, "1") for step in range(9, 37)]
    for rank in (0, 1):
        assert _steps(tmp_path, rank) == expected
    _assert_same_weights(tmp_path, reference)


def test_a_group_that_cannot_form_names_the_missing_rank(tmp_path: Path) -> None:
    # rank 1 never reaches its process group; rank 0 gives up after ACCEL_JOIN_TIMEOUT seconds
    stall = tmp_path / "stall.py"
    stall.write_text(
        "import os, signal\n"
        "if os.environ['RANK'] == '1':\n"
        "    signal.pause()\n"
        "from accel_core import Accelerator\n"
        "Accelerator()\n"
    )
    command = [*_accel(), "launch", "--quiet", "--cpu", "--num_processes", "2"]
    command += ["--join_timeout", "3", str(stall)]
    started = time.monotonic()
    result = subprocess.run(
        command, env=_environment(), capture_output=True, text=True, timeout=120
    )
    assert time.monotonic() - started < 60
    assert result.returncode == 1
    assert "GroupFormationError" in result.stderr
    assert (
        "did not form within 3 s (ACCEL_JOIN_TIMEOUT); still missing: rank(s) 1 (on machine 0"
        in (result.stderr)
    )


def _preempted_then_resumed(
    tmp_path: Path,
    reference: dict[str, torch.Tensor],
    signal_name: str,
    launch: tuple[str, ...] = (),
    step: int | None = None,
) -> subprocess.CompletedProcess[str]:
    step = random.Random(signal_name).randrange(3, 30) if step is None else step
    job = ("--signal-at", str(step), "--signal", signal_name)
    stopped = _launch(tmp_path, *job, launch_args=launch)
    assert stopped.returncode == PREEMPTED, stopped.stderr[-3000:]
    line = [text for text in stopped.stderr.splitlines() if "(preemption)" in text]
    assert len(line) == 1, stopped.stderr[-3000:]
    assert line[0].startswith(f"accel launch: stopped by {signal_name} (preemption) after batch")
    folder = Path(line[0].split("checkpoint saved to ")[1].split(" (to resume")[0])
    saved = _checkpoint_step(folder)
    # every rank stopped after the same step, that of the checkpoint: nothing ran that is lost
    for rank in (0, 1):
        assert _steps(tmp_path, rank)[-1] == (saved, "0")
    assert step < saved <= step + 3
    resumed = _launch(tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _steps(tmp_path, 0)[saved] == (saved + 1, "0")  # the resumed run's first step
    _assert_same_weights(tmp_path, reference)
    return stopped


def test_sigterm_to_the_launcher_saves_and_the_resumed_run_is_identical(
    reference: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    _preempted_then_resumed(tmp_path, reference, "SIGTERM")


def test_sigusr1_as_preemption_signal(reference: dict[str, torch.Tensor], tmp_path: Path) -> None:
    # SLURM's --signal=USR1@90: the launcher passes SIGUSR1 on instead of printing the hang table
    _preempted_then_resumed(
        tmp_path, reference, "SIGUSR1", launch=("--preemption_signal", "USR1"), step=7
    )


def test_a_second_signal_during_the_save_corrupts_nothing(
    reference: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    # the job sends SIGTERM again from inside the preemption save: the launcher stops at once
    # and its workers die with it mid-save; the previous checkpoint stays the latest complete one
    job = ("--signal-at", "13", "--signal-again-during-save")
    stopped = _launch(tmp_path, *job)
    assert stopped.returncode in (PREEMPTED, 128 + signal.SIGTERM), stopped.stderr[-3000:]
    checkpoints = tmp_path / "checkpoints"
    complete = sorted(
        (
            folder
            for folder in checkpoints.iterdir()
            if (folder / "accel_checkpoint.json").is_file()
        ),
        key=lambda folder: int(folder.name.rsplit("_", 1)[1]),
    )
    assert _checkpoint_step(complete[-1]) in (12, 14, 15)
    resumed = _launch(tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_same_weights(tmp_path, reference)


def test_a_process_started_without_accel_launch_saves_on_its_own(tmp_path: Path) -> None:
    # as under srun or a plain `python train.py`: the signal reaches the process itself
    def run(project: Path, *job: str, **env: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(JOB), "--project", str(project)]
        command += ["--result", str(project / "result.pt"), *job]
        return subprocess.run(
            command, env=_environment(**env), capture_output=True, text=True, timeout=120
        )

    uninterrupted = tmp_path / "uninterrupted"
    assert run(uninterrupted).returncode == 0
    project = tmp_path / "preempted"
    scontrol = tmp_path / "bin" / "scontrol"  # SLURM's command, as a stand-in that records
    scontrol.parent.mkdir()
    scontrol.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "scontrol.args"}\n')
    scontrol.chmod(0o755)
    path = f"{scontrol.parent}{os.pathsep}{os.environ['PATH']}"
    stopped = run(
        project, "--signal-at", "20", "--signal-pid-from", "self", SLURM_JOB_ID="4242", PATH=path
    )
    assert stopped.returncode == PREEMPTED, stopped.stderr[-3000:]
    assert "accel: stopped by SIGTERM (preemption) after batch" in stopped.stderr
    assert "accel: SLURM job 4242 requeued" in stopped.stderr
    assert (tmp_path / "scontrol.args").read_text().split() == ["requeue", "4242"]
    assert _steps(project, 0)[-1] == (21, "0")
    resumed = run(project)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_same_weights(project, _weights(uninterrupted))


def test_preemption_off_keeps_the_signals_default(tmp_path: Path) -> None:
    stopped = _launch(tmp_path, "--signal-at", "5", launch_args=("--preemption_signal", "none"))
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    assert "no preemption checkpoint was written" in stopped.stderr
    assert _checkpoint_step(tmp_path / "checkpoints" / "checkpoint_0") == 4
    assert not (tmp_path / "checkpoints" / "checkpoint_1").exists()


def _two_machines(
    tmp_path: Path, machines: str, replace: bool
) -> tuple[subprocess.CompletedProcess[str], list[int]]:
    from accel_testing import free_port

    port = free_port()
    launch = [*_accel(), "launch", "--quiet", "--cpu", "--num_machines", machines]
    launch += ["--num_processes", "2", "--rdzv_backend", "c10d", "--max_restarts", "3"]
    launch += ["--main_process_ip", "127.0.0.1", "--main_process_port", str(port)]
    # a machine whose heartbeats stop is dropped after keep_alive_interval x keep_alive_max_attempt
    # seconds (torch's default: 5 x 3 = 15 s of the test waiting); 1 x 5 = 5 s here
    conf = "last_call_timeout=2,keep_alive_interval=1,keep_alive_max_attempt=5"
    launch += ["--rdzv_conf", conf]
    job = [str(JOB), "--project", str(tmp_path), "--result", str(tmp_path / "result.pt")]
    # machine 1 (whichever ranks c10d deals it) SIGKILLs its own launcher at step 10
    job += ["--signal-at", "10", "--signal-where", "LOSE_THIS_MACHINE", "--signal", "SIGKILL"]

    def machine(rank: int, name: str) -> subprocess.Popen[str]:
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115
        lose = {"LOSE_THIS_MACHINE": "1"} if name == "machine1" else {}
        return subprocess.Popen(
            [*launch, "--machine_rank", str(rank), *job],
            env=_environment(**lose),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )

    main = machine(0, "machine0")
    codes = [machine(1, "machine1").wait(timeout=180)]
    if replace:
        codes.append(machine(1, "replacement").wait(timeout=180))
    main.wait(timeout=180)
    output = (tmp_path / "machine0.log").read_text()
    return subprocess.CompletedProcess(main.args, main.returncode, output, output), codes


def test_a_lost_machine_replaced_continues_bit_identical(
    reference: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    main, codes = _two_machines(tmp_path, "2", replace=True)
    assert codes == [-signal.SIGKILL, 0]  # the launcher itself was SIGKILLed
    assert main.returncode == 0, main.stdout[-3000:]
    _assert_same_weights(tmp_path, reference)


def test_a_lost_machine_of_a_range_finishes_on_the_survivor(tmp_path: Path) -> None:
    main, codes = _two_machines(tmp_path, "1:2", replace=False)
    assert codes == [-signal.SIGKILL]
    assert main.returncode == 0, main.stdout[-3000:]
    assert "goes on with 1 of the 2 machines launched (1 processes)" in main.stdout
    assert torch.load(tmp_path / "result.pt")["step"] > 36  # one process: twice the batches


def test_auto_resume_continues_a_script_that_never_calls_load_state(
    reference: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    # --no-load: the plain loop `for epoch in range(3): for batch in loader:`; preempted in
    # epoch 1, then relaunched with --auto_resume: epoch 0 is iterated empty, epoch 1 continues
    launch = ("--auto_resume",)
    stopped = _launch(tmp_path, "--no-load", "--signal-at", "13", launch_args=launch)
    assert stopped.returncode == PREEMPTED, stopped.stderr[-3000:]
    saved = _steps(tmp_path, 0)[-1][0]
    resumed = _launch(tmp_path, "--no-load", launch_args=launch)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [step for step, _ in _steps(tmp_path, 0)] == list(range(1, 37))
    assert saved > 12  # the checkpoint was taken inside the second epoch
    _assert_same_weights(tmp_path, reference)


def test_auto_resume_after_a_restart_and_a_project_folder_given_at_launch(
    reference: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    # a script without a project folder opts in with --project_dir; a restart resumes by itself
    launch = ("--auto_resume", "--project_dir", str(tmp_path), "--max_restarts", "1")
    result = _launch(tmp_path, "--no-load", "--no-project", "--die-at", "10", launch_args=launch)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = [(step, "0") for step in range(1, 11)] + [(step, "1") for step in range(9, 37)]
    assert _steps(tmp_path, 0) == expected
    _assert_same_weights(tmp_path, reference)


def test_launcher_and_workers_agree_on_the_preemption_contract():
    # accel-launch can't import accel-core (torch): the exit code, the marker file and the
    # reading of signal names are written in both, and pinned equal here
    import argparse

    from accel_core import preemption
    from accel_launch.launch import faults
    from accel_launch.launch.options import add_options
    from accel_launch.launch.resolve import resolve

    assert faults.PREEMPTED_EXIT_CODE == preemption.PREEMPTED_EXIT_CODE == PREEMPTED
    assert faults.MARKER_FILE == preemption.MARKER_FILE
    parser = argparse.ArgumentParser()
    add_options(parser)
    for given in ("SIGTERM", "usr1", "SIGUSR2", "10", "hup", "none"):
        plan = resolve(parser.parse_args(["--cpu", "--preemption_signal", given]), {}, {})
        worker_sees = preemption.preemption_signal({"ACCEL_PREEMPTION_SIGNAL": given})
        assert plan["preemption_signal"] == (worker_sees.name if worker_sees else "none"), given
