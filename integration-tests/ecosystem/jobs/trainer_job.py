"""Trainer, peft LoRA and trl SFTTrainer runs on the tiny local model; the same file runs under
Hugging Face Accelerate and under accel's ``accelerate`` alias (it imports neither).

    trainer_job.py ASSETS OUT PHASE [PHASE ...]

Phases, run one after the other in this process (on every rank it was launched on):

- ``full``: ``Trainer`` for 8 optimizer steps, 2 samples per device,
  ``gradient_accumulation_steps=2``, logging every step, evaluation with ``compute_metrics``
  every 4 steps and after training, a checkpoint every 4 steps (``OUT/full/checkpoint-4``), then
  ``save_model(OUT/full/final)`` read back with ``from_pretrained``.
- ``resume=CHECKPOINT``: the same run resumed from ``CHECKPOINT`` (``resume_from_checkpoint``).
- ``lora``: a peft LoRA model (``q_proj``, ``v_proj``) trained the same way, without evaluation;
  the ``Trainer`` saves the adapter at steps 4 and 8 (``OUT/lora/checkpoint-*``).
- ``lora-resume=CHECKPOINT``: that run resumed from ``CHECKPOINT``.
- ``sft``: trl's ``SFTTrainer`` on the texts (its defaults: bf16 autocast, gradient
  checkpointing), then ``save_model(OUT/sft/final)`` read back with ``from_pretrained``.

Rank 0 writes ``OUT/<phase name>.json`` (the log history without timings, the metrics
``compute_metrics`` returned, whether the read-back weights are equal, which ``Accelerator`` class
ran) and ``OUT/<phase name>.safetensors`` (the final trainable weights).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

ASSETS, OUT = Path(sys.argv[1]), Path(sys.argv[2])
PHASES = sys.argv[3:]
RANK = int(os.environ.get("RANK", "0"))
STEPS = 8
#: Keys of the log history that measure time, not training.
TIMING = ("runtime", "per_second", "preparation_time")


def texts(split: str) -> list[str]:
    lines = (ASSETS / "data" / f"{split}.jsonl").read_text().splitlines()
    return [json.loads(line)["text"] for line in lines]


def tokenized(tokenizer, split: str):
    from datasets import Dataset

    return Dataset.from_dict({"input_ids": [tokenizer(text)["input_ids"] for text in texts(split)]})


def compute_metrics(prediction) -> dict[str, float]:
    """Sees every evaluation sample exactly once: the count is part of the result."""
    predicted, labels = prediction.predictions[:, :-1], prediction.label_ids[:, 1:]
    valid = labels != -100
    return {
        "samples": int(labels.shape[0]),
        "tokens": int(valid.sum()),
        "accuracy": float((predicted == labels)[valid].mean()),
        "checksum": int(np.where(valid, predicted, 0).sum()),
    }


def arguments(name: str, **changes):
    from transformers import TrainingArguments

    settings = dict(
        output_dir=str(OUT / name),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        gradient_accumulation_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=4,
        save_strategy="steps",
        save_steps=4,
        use_cpu=True,  # else, on a machine without accelerators, no process group (1 process each)
        report_to="none",
        disable_tqdm=True,
        seed=42,
    )
    settings.update(changes)
    return TrainingArguments(**settings)


def trainer_for(name: str, **changes):
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        Trainer,
    )

    tokenizer = AutoTokenizer.from_pretrained(ASSETS / "model")
    return Trainer(
        model=AutoModelForCausalLM.from_pretrained(ASSETS / "model"),
        args=arguments(name, **changes),
        train_dataset=tokenized(tokenizer, "train"),
        eval_dataset=tokenized(tokenizer, "test"),
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=lambda logits, labels: logits.argmax(-1),
    )


def lora_trainer_for(name: str):
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForLanguageModeling,
        Trainer,
        set_seed,
    )

    tokenizer = AutoTokenizer.from_pretrained(ASSETS / "model")
    set_seed(7)  # the LoRA matrices' initial values
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=0.1,
        target_modules=["q_proj", "v_proj"],
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(ASSETS / "model"), config)
    return Trainer(
        model=model,
        args=arguments(name, eval_strategy="no"),
        train_dataset=tokenized(tokenizer, "train"),
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
    )


def sft_trainer_for(name: str):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(
        output_dir=str(OUT / name),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        max_length=32,
        use_cpu=True,  # and bf16 (trl's default) on a CPU needs it
        report_to="none",
        disable_tqdm=True,
        seed=42,
    )
    return SFTTrainer(
        model=str(ASSETS / "model"),
        args=config,
        train_dataset=Dataset.from_dict({"text": texts("train")}),
        processing_class=AutoTokenizer.from_pretrained(ASSETS / "model"),
    )


def trainable(model) -> dict[str, torch.Tensor]:
    names = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    state = model.state_dict()
    return {name: state[name].detach().clone().contiguous() for name in sorted(names)}


def read_back_equal(trainer, folder: Path) -> bool:
    """``save_model(folder)`` then ``from_pretrained(folder)``: every tensor equal."""
    from transformers import AutoModelForCausalLM

    trainer.save_model(str(folder))
    trainer.accelerator.wait_for_everyone()
    loaded = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    mine = trainer.accelerator.unwrap_model(trainer.model).state_dict()
    return sorted(loaded) == sorted(mine) and all(
        torch.equal(loaded[name], value) for name, value in mine.items()
    )


def untimed(entry: dict) -> dict:
    return {key: value for key, value in entry.items() if not any(t in key for t in TIMING)}


def record(name: str, trainer, **extra) -> None:
    history = [untimed(entry) for entry in trainer.state.log_history]
    accelerator = type(trainer.accelerator)
    result = {
        "log_history": history,
        "world_size": trainer.accelerator.num_processes,
        "accelerator": f"{accelerator.__module__}.{accelerator.__qualname__}",
        **extra,
    }
    weights = trainable(trainer.accelerator.unwrap_model(trainer.model))
    if RANK == 0:
        (OUT / f"{name}.json").write_text(json.dumps(result, indent=1))
        save_file(weights, str(OUT / f"{name}.safetensors"))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for phase in PHASES:
        name, _, checkpoint = phase.partition("=")
        if name == "full":
            trainer = trainer_for("full")
            trainer.train()
            metrics = trainer.evaluate()
            equal = read_back_equal(trainer, OUT / "full" / "final")
            record(name, trainer, metrics=untimed(metrics), read_back_equal=equal)
        elif name == "resume":
            trainer = trainer_for("resume")
            trainer.train(resume_from_checkpoint=checkpoint)
            record(name, trainer)
        elif name == "lora":
            trainer = lora_trainer_for("lora")
            trainer.train()
            record(name, trainer)
        elif name == "lora-resume":
            trainer = lora_trainer_for("lora-resume")
            trainer.train(resume_from_checkpoint=checkpoint)
            record(name, trainer)
        elif name == "sft":
            trainer = sft_trainer_for("sft")
            trainer.train()
            equal = read_back_equal(trainer, OUT / "sft" / "final")
            record(name, trainer, read_back_equal=equal)
        else:
            raise SystemExit(f"unknown phase {phase!r}")
        trainer.accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
