"""A training run under a backend strategy that checkpoints, can kill itself with SIGKILL, and
resumes from its latest checkpoint. Run as a script by test_backend_kill_resume.py.

The strategy comes from argv (``fsdp``, ``fsdp-full``, ``fsdp1``, ``deepspeed2``,
``deepspeed3``, ``xla``). The model has dropout, the loader shuffles through the seedable sampler,
gradients accumulate over 2 batches and a scheduler steps: everything a resumed run must restore
exactly. ``--die-after K``
kills every process right after batch K (counted over the whole run); ``--resume`` loads the
latest checkpoint and continues mid-epoch through ``skip_first_batches``. At the end the main
process writes the full weights to ``<project>/final_weights.pt``.

Usage: resumable_backend_job.py PROJECT STRATEGY [--die-after K] [--resume]
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_core import Accelerator, DataLoaderConfiguration, ProjectConfiguration, set_seed

EPOCHS = 2
SAMPLES = 48
BATCH = 4
EVERY = int(os.environ.get("CHECKPOINT_EVERY", "5"))


def _engine_options(strategy: str) -> dict:
    if strategy == "xla":  # one process on XLA's CPU device (PJRT_DEVICE=CPU)
        from accel_backends.xla.strategy import XLAStrategy

        return {"strategy": XLAStrategy()}
    if strategy.startswith("fsdp"):
        from accel_backends import FullyShardedDataParallelPlugin

        kind = "FULL_STATE_DICT" if strategy == "fsdp-full" else "SHARDED_STATE_DICT"
        version = 1 if strategy == "fsdp1" else 2
        plugin = FullyShardedDataParallelPlugin(fsdp_version=version, state_dict_type=kind)
        return {"fsdp_plugin": plugin}
    from accel_backends import DeepSpeedPlugin

    stage = int(strategy[-1])
    plugin = DeepSpeedPlugin(
        zero_stage=stage,
        gradient_accumulation_steps=2,
        gradient_clipping=0,
        zero3_save_16bit_model=True,
    )
    return {"deepspeed_plugin": plugin}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("project")
    parser.add_argument("strategy")
    parser.add_argument("--die-after", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    set_seed(0)
    accelerator = Accelerator(
        gradient_accumulation_steps=2,
        project_config=ProjectConfiguration(
            project_dir=args.project, automatic_checkpoint_naming=True, total_limit=2
        ),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
        **_engine_options(args.strategy),
    )
    data = torch.Generator().manual_seed(3)
    dataset = TensorDataset(torch.randn(SAMPLES, 6, generator=data), torch.randn(SAMPLES, 1))
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.25), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    skip, batches_seen = 0, 0
    if args.resume:
        accelerator.load_state()
        resume = loader.progress.resume
        skip = resume.batches if resume is not None else 0
        batches_seen = loader.iteration * len(loader) + skip  # where the checkpoint was taken
    for _epoch in range(loader.iteration, EPOCHS):
        batches = accelerator.skip_first_batches(loader, skip) if skip else loader
        skip = 0
        for x, y in batches:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            batches_seen += 1
            if batches_seen % EVERY == 0:
                accelerator.save_state()
            if batches_seen == args.die_after:
                os.kill(os.getpid(), signal.SIGKILL)
    weights = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        flat = torch.cat([weights[k].detach().float().flatten() for k in sorted(weights)])
        torch.save(
            {"weights": flat, "batches": batches_seen, "step": accelerator.step},
            Path(args.project) / "final_weights.pt",
        )
    accelerator.end_training()


if __name__ == "__main__":
    main()
