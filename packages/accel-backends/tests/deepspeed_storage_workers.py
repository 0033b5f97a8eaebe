"""Workers of the DeepSpeed object-storage test: ``save_state`` to an ``s3://`` URL (the server
and credentials come from the environment) and ``load_state`` back, on real processes."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from deepspeed_workers import _continuing_run, main_writes, register, reset, train_steps, weights


def save_to_bucket_and_continue() -> None:
    """For ZeRO-2 and ZeRO-3: train 3 steps, save_state to the bucket, train 3 more (losses
    recorded); a fresh Accelerator and model (other weights) load_state from the bucket and
    train the same 3 steps."""
    out, bucket = Path(sys.argv[1]), sys.argv[2]
    register()
    results = {}
    for stage in (2, 3):
        url = f"s3://{bucket}/zero{stage}"
        accelerator, model, optimizer, scheduler = _continuing_run(stage, False, seed=0)
        train_steps(accelerator, model, optimizer, scheduler, range(3), torch.float32)
        accelerator.save_state(url)
        saved = weights(accelerator, model)
        first = train_steps(accelerator, model, optimizer, scheduler, range(3, 6), torch.float32)
        accelerator.end_training()
        reset()
        accelerator, model, optimizer, scheduler = _continuing_run(stage, False, seed=1)
        accelerator.load_state(url)
        loaded = weights(accelerator, model)
        second = train_steps(accelerator, model, optimizer, scheduler, range(3, 6), torch.float32)
        results[f"zero{stage}"] = {
            "loaded_equal": loaded.keys() == saved.keys()
            and all(torch.equal(saved[k], loaded[k]) for k in saved),
            "losses": [first, second],
        }
        accelerator.end_training()
        reset()
    main_writes(out, "results.json", results)
