"""Worker for the checkpoint fault tests: a save or load that only some ranks call, a process
killed with SIGKILL in the middle of writing a checkpoint, damaged files.

Usage: checkpoint_faults_job.py PROJECT
    {main-only|load-main-only|kill-mid-save|round-trip|corrupt|manifest-on-rank-1}
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import torch

from accel_core import Accelerator, ProjectConfiguration


class KillWhenPickled:
    """Kills its process with SIGKILL while torch.save pickles it (mid-checkpoint)."""

    def __init__(self, armed: bool) -> None:
        self.armed = armed

    def state_dict(self) -> dict:
        return {"bomb": _Bomb() if self.armed else 0}

    def load_state_dict(self, state: dict) -> None:
        pass


class _Bomb:
    def __reduce__(self):
        os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    project, mode = Path(sys.argv[1]), sys.argv[2]
    accelerator = Accelerator(
        project_config=ProjectConfiguration(
            project_dir=str(project), automatic_checkpoint_naming=True, total_limit=1
        )
    )
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(4, 3))
    if mode == "main-only":
        if accelerator.is_main_process:
            accelerator.save_state()
        accelerator.wait_for_everyone()
    elif mode == "load-main-only":
        accelerator.save_state()
        if accelerator.is_main_process:
            accelerator.load_state()
        accelerator.wait_for_everyone()
    elif mode == "kill-mid-save":
        bomb = KillWhenPickled(armed=False)
        accelerator.register_for_checkpointing(bomb)
        accelerator.save_state()  # checkpoint_0, complete
        with torch.no_grad():
            model.module.weight.add_(1.0) if hasattr(model, "module") else model.weight.add_(1.0)
        bomb.armed = accelerator.is_main_process
        accelerator.save_state()  # checkpoint_1: the main process dies while writing it
    elif mode == "round-trip":
        folder = Path(accelerator.save_state())
        before = model.state_dict()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.zero_()
        accelerator.load_state()
        same = all(torch.equal(before[k], v) for k, v in model.state_dict().items())
        print(f"RESULT rank={accelerator.process_index} same={same} files=", end="")
        print(",".join(sorted(p.name for p in folder.iterdir())))
    elif mode == "corrupt":
        folder = Path(accelerator.save_state())
        if accelerator.is_main_process:
            for name in ("model.safetensors", "random_states_1.pkl"):
                data = bytearray((folder / name).read_bytes())
                data[-1] ^= 0xFF
                (folder / name).write_bytes(bytes(data))
        accelerator.wait_for_everyone()
        from accel_core.checkpointing import CheckpointError

        try:
            accelerator.load_state()
        except CheckpointError as error:
            print(f"LOADERR rank={accelerator.process_index} {error}")
    elif mode == "manifest-on-rank-1":
        # Each rank loads a copy of its own; rank 1's manifest is not JSON. Only rank 1 can see
        # it, and every rank must refuse, in rank 1's words, instead of waiting for rank 1.
        import shutil

        from accel_core.checkpointing import CheckpointError

        folder = Path(accelerator.save_state())
        copy = project / f"copy_{accelerator.process_index}"
        shutil.copytree(folder, copy)
        if accelerator.process_index == 1:
            (copy / "accel_checkpoint.json").write_text("{not json")
        try:
            accelerator.load_state(str(copy))
        except CheckpointError as error:
            print(f"LOADERR rank={accelerator.process_index} {error}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
