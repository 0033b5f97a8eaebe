"""Checkpoints of the FSDP2 strategy saved by 2 real processes (gloo, CPU) load on 1 and on 3:
sharded ones through torch.distributed.checkpoint (which reshards), full ones from
model.safetensors; training then continues exactly, and load_state says what it can't map."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from worker_env import worker_env

from accel_testing.processes import run_workers

WORKERS = f"{Path(__file__).parent / 'fsdp_reshard_workers.py'}"


def _run(processes: int, function: str, args: list[str]) -> None:
    run_workers(
        processes,
        function=f"{WORKERS}::{function}",
        args=args,
        env=worker_env(),
        timeout=180,
    )


def _loader_warning(world: int) -> str:
    # The save stopped after 3 batches per process on 2 processes (6 of the epoch's 12).
    per_process = 6 // world
    return (
        "load_state: data loader 0 was saved by 2 processes after 3 batch(es) per process of "
        f"epoch 0 (6 in all); on {world} process{'es' if world > 1 else ''} that is "
        f"{per_process} per process: "
        f"skip_first_batches(loader, {per_process}) skips the same samples. The epoch's global "
        "order is restored; the random states of the processes are not mapped."
    )


def _expected_warnings(folder: Path, world: int) -> list[list[str]]:
    """What load_state warns on each rank of ``world`` processes (sorted, as recorded)."""
    saved_by = f"load_state: {folder} was saved by 2 process(es) and is loaded on {world}: "
    restored = "models, optimizers, schedulers and registered objects are restored"
    if world == 1:
        return [
            [
                f"{saved_by}{restored}; the random states of rank(s) [1] are not used.",
                _loader_warning(1),
            ]
        ]
    no_rng = (
        f"load_state: {folder} has no random_states_2.pkl (it was saved by 2 process(es), this "
        "is rank 2 of 3); this process keeps its random states and takes the step and loader "
        "positions from rank 0's file."
    )
    return [
        [f"{saved_by}{restored}.", _loader_warning(3)],
        [_loader_warning(3)],
        [no_rng, _loader_warning(3)],
    ]


@pytest.mark.parametrize("state_dict_type", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_a_2_process_checkpoint_continues_exactly_on_1_and_on_3_processes(
    tmp_path, state_dict_type
):
    _run(2, "save", [str(tmp_path), state_dict_type])
    folder = tmp_path / "checkpoint"
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    if state_dict_type == "SHARDED_STATE_DICT":
        assert "pytorch_model_fsdp_0/__1_0.distcp" in files and "model.safetensors" not in files
    else:
        assert {"model.safetensors", "optimizer.bin"} <= set(files)
        assert not any(f.startswith("pytorch_model_fsdp_0/") for f in files)
    for world in (1, 3):
        _run(world, "load_and_continue", [str(tmp_path), state_dict_type])
        expected = _expected_warnings(folder, world)
        # inp.weight has 8 rows: whole on 1 process; 3, 3 and 2 on 3 (FSDP2 pads the last)
        rows = [8] if world == 1 else [3, 3, 2]
        for rank in range(world):
            result = json.loads((tmp_path / f"result_{world}_{rank}.json").read_text())
            assert result == {
                "world": world,
                "local_rows": rows[rank],
                "warnings": expected[rank],
                # the full weights and optimizer state (moments and steps) of the save, exactly
                "loaded_model": True,
                "loaded_optimizer": True,
                # Exact: the reference runs on the same processes from the same states (handed
                # over in memory), on the same per-rank batches, so every operation and every
                # collective is the same; only a wrong or missing shard could differ.
                "losses": True,
                "weights": True,
                "moved": True,
                "losses_fall": True,
            }, (world, rank)
