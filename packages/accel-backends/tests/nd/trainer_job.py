"""transformers' ``Trainer`` on accel (``accel launch --as-accelerate``): ``trainer_job.py OUT
MODEL MODE``. MODE ``tp`` loads the model split over every process (``from_pretrained(path,
tp_plan="auto", tp_size=WORLD_SIZE)``; the Trainer then builds ``ParallelismConfig(tp_size=...)``
itself), ``whole`` loads it whole (one process: the reference). Rank 0 writes the logged losses
and gradient norms to ``OUT/log.json``. float64 throughout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from torch.utils.data import Dataset
from transformers import LlamaForCausalLM, Trainer, TrainingArguments


class Tokens(Dataset):
    """32 sequences of 8 random tokens, each its own label."""

    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        tokens = torch.randint(0, 96, (8,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": tokens, "labels": tokens.clone()}


def main() -> None:
    out, path, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    split = {"tp_plan": "auto", "tp_size": world} if mode == "tp" else {}
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float64, **split)
    arguments = TrainingArguments(
        output_dir=str(out / "trainer"),
        per_device_train_batch_size=4,
        max_steps=4,
        logging_steps=1,
        max_grad_norm=1.0,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=Tokens())
    trainer.train()
    if trainer.accelerator.is_main_process:
        logged = [e for e in trainer.state.log_history if "loss" in e]
        result = {
            "losses": [float(e["loss"]) for e in logged],
            "grad_norms": [float(e["grad_norm"]) for e in logged],
            "strategy": type(trainer.accelerator.strategy).__name__,
            "tp_size": getattr(trainer.accelerator.parallelism_config, "tp_size", None),
        }
        (out / "log.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
