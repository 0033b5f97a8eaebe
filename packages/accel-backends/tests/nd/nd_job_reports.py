"""What the pipeline- and expert-parallel test jobs share: their launch from a test (a JSON
result back, or every process SIGKILLed), checkpointing and dying on cue, and the parts of the
report every process and rank 0 write."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist


def run_job(script: Path, nprocs: int, out: Path, *args: str, killed: bool = False) -> dict:
    """Run ``script OUT ARGS`` on ``nprocs`` gloo processes; its ``OUT/result.json``, or (with
    ``killed``) ``{}`` after checking that every process died by SIGKILL."""
    from accel_testing import run_workers

    results = run_workers(
        nprocs, script=script, args=[str(out), *args], timeout=240, check=not killed
    )
    if killed:
        codes = [result.returncode for result in results]
        assert codes == [-signal.SIGKILL] * nprocs, [r.stderr[-2000:] for r in results]
        return {}
    return json.loads((out / "result.json").read_text())


def checkpoint_or_die(accelerator: object, steps_done: int, every: int, die_after: int) -> None:
    """``save_state`` every ``every`` steps (0: never); SIGKILL every process after step
    ``die_after`` (once they all got there)."""
    if every and steps_done % every == 0:
        accelerator.save_state()  # type: ignore[attr-defined]
    if steps_done == die_after:
        dist.barrier()
        os.kill(os.getpid(), signal.SIGKILL)


def save_if_asked(accelerator: object, model: torch.nn.Module, save: Path | None) -> None:
    """``save_state`` into ``save/state`` and ``save_model`` into ``save/model`` (safetensors)."""
    if save is not None:
        accelerator.save_state(str(save / "state"))  # type: ignore[attr-defined]
        accelerator.save_model(model, str(save / "model"), safe_serialization=True)  # type: ignore[attr-defined]


def mesh_names(accelerator: object) -> list[str]:
    """The names of the Accelerator's device mesh (empty without one)."""
    mesh = accelerator.torch_device_mesh  # type: ignore[attr-defined]
    return list(mesh.mesh_dim_names) if mesh is not None else []


def every_process(facts: dict) -> list[dict]:
    """Every process's ``facts``, in rank order."""
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, facts)
    return gathered


def saved_model_report(save: Path | None, expected: dict[str, torch.Tensor]) -> dict:
    """The keys of the model ``save_if_asked`` wrote, read back with safetensors, and its
    largest difference from ``expected`` (None without a save)."""
    saved = {}
    if save is not None:
        from safetensors.torch import load_file

        saved = load_file(str(save / "model" / "model.safetensors"))
    return {
        "saved_model_keys": sorted(saved),
        "saved_model_difference": max(
            ((v - expected[k]).abs().max().item() for k, v in saved.items()), default=None
        ),
    }
