"""The object-storage tests' training job: a user's script whose project folder is a URL.

``--project s3://bucket/run``: checkpoints go to ``<project>/checkpoints/checkpoint_<n>`` (automatic
naming, ``--total-limit``), saved every ``--save-every`` steps; at start the job resumes from the
latest complete one when the bucket has one (it looks for their manifests with fsspec, as a user
would). ``--fsdp`` trains under FSDP2 with sharded checkpoints (every process uploads its own
shards); ``--async-save`` saves in the background. ``--kill-in-save N`` makes rank 0 SIGKILL
itself during its N-th save of this run, right after the first of its files reached the bucket
(so that save is left without its manifest). ``--save-model URL`` ends with ``save_model`` there.
At the end the main process writes ``--result`` (the final weights, the step counter) locally.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal

import fsspec
import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_core import Accelerator, ProjectConfiguration, set_seed
from accel_core.checkpointing import object_transfers


class StepCounter:
    """The script's own bookkeeping, saved with the checkpoint."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = int(state["step"])


def die_during_save(accelerator: Accelerator, number: int) -> None:
    """SIGKILL this process once its first file of save ``number`` is in the store. The save is
    counted by a save pre-hook, which runs inside ``save_state`` after an earlier background save
    finished, so a background save's files are counted as its own."""
    saves, armed = [0], [False]

    def count(*_: object) -> None:
        saves[0] += 1
        armed[0] = saves[0] == number

    def then_die() -> None:
        if armed[0]:
            os.kill(os.getpid(), signal.SIGKILL)

    upload, finish = object_transfers.Uploader._upload, object_transfers.PartsUpload.__exit__

    def upload_then_die(self: object, name: str) -> None:
        upload(self, name)  # type: ignore[arg-type]
        then_die()

    def finish_then_die(self: object, *exc: object) -> None:
        finish(self, *exc)  # type: ignore[arg-type]
        then_die()

    accelerator.register_save_state_pre_hook(count)
    object_transfers.Uploader._upload = upload_then_die  # type: ignore[method-assign]
    object_transfers.PartsUpload.__exit__ = finish_then_die  # type: ignore[method-assign]


def build_accelerator(args: argparse.Namespace) -> Accelerator:
    config = ProjectConfiguration(
        project_dir=args.project, automatic_checkpoint_naming=True, total_limit=args.total_limit
    )
    if not args.fsdp:
        return Accelerator(project_config=config)
    from accel_backends import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT")
    return Accelerator(project_config=config, fsdp_plugin=plugin)


def main() -> None:
    # a hang shows where: every thread's stack on stderr, then exit (the test prints stderr)
    faulthandler.dump_traceback_later(
        int(os.environ.get("STORAGE_JOB_HANG_SECONDS", "150")), exit=True
    )
    parser = argparse.ArgumentParser()
    parser.add_argument("--project", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--save-every", type=int, default=4)
    parser.add_argument("--total-limit", type=int, default=2)
    parser.add_argument("--kill-in-save", type=int, default=0)
    parser.add_argument("--async-save", action="store_true")
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--save-model", default="")
    args = parser.parse_args()

    accelerator = build_accelerator(args)
    set_seed(0)
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(64, 8, generator=generator)
    targets = features @ torch.linspace(-1.0, 1.0, 8) + 0.25
    loader = DataLoader(TensorDataset(features, targets), batch_size=4, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    counter = StepCounter()
    accelerator.register_for_checkpointing(counter)
    if args.kill_in_save and accelerator.is_main_process:
        die_during_save(accelerator, args.kill_in_save)

    fs, path = fsspec.core.url_to_fs(args.project)
    skip = 0
    if fs.glob(f"{path}/checkpoints/checkpoint_*/accel_checkpoint.json"):
        accelerator.load_state()  # the latest complete checkpoint
        resume = loader.progress.resume  # None when it was saved at an epoch boundary
        skip = resume.batches if resume is not None else 0
    for _epoch in range(loader.iteration, args.epochs):
        batches = accelerator.skip_first_batches(loader, skip) if skip else loader
        skip = 0
        for inputs, labels in batches:
            loss = torch.nn.functional.mse_loss(model(inputs).squeeze(-1), labels)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            counter.step += 1
            if counter.step % args.save_every == 0:
                accelerator.save_state(async_save=args.async_save)
    accelerator.wait_for_everyone()
    weights = accelerator.get_state_dict(model)
    if args.save_model:
        accelerator.save_model(model, args.save_model, max_shard_size=300)
    accelerator.end_training()
    if accelerator.is_main_process:
        torch.save({"weights": weights, "step": counter.step}, args.result)


if __name__ == "__main__":
    main()
