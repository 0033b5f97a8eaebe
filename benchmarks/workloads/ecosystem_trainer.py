"""transformers ``Trainer`` on the bench's small Llama; the same file runs under Hugging Face
Accelerate and under accel's ``accelerate`` alias (``ACCEL_AS_ACCELERATE=1``): it imports neither.

Usage: python ecosystem_trainer.py <model> <output_dir> <max_steps> <warmup_steps>, directly (1
process) or under ``python -m torch.distributed.run`` (rank 0 reports). The model comes from
``from_pretrained``; the data are random token ids (sequence 128, batch 4 per process, labels =
inputs), AdamW, no logging, evaluation or checkpoints. A ``TrainerCallback`` records
``time.perf_counter()`` and ``time.process_time()`` at every ``on_step_end`` and ``time.time()`` at
the end of step 1. Prints one JSON line: steps per second over the steps after ``warmup_steps``
(the time from the end of step ``warmup_steps`` to the end of the last step), the CPU seconds this
process spent per step over those steps (all its threads: less sensitive than wall time to other
load on the machine), the wall-clock time at the end of step 1 and the CPU seconds the process had
used by then (from its start, imports included), the world size and the class of the
``Accelerator`` the Trainer ran.
"""

import json
import sys
import time

import torch
from process_exit import end_process_group
from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

SEQUENCE = 128
BATCH = 4


class StepClock(TrainerCallback):
    def __init__(self) -> None:
        self.ends: list[float] = []
        self.cpu_ends: list[float] = []
        self.first_step_end: float | None = None
        self.first_step_cpu: float | None = None

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())
        self.cpu_ends.append(time.process_time())
        if state.global_step == 1:
            self.first_step_end = time.time()
            self.first_step_cpu = time.process_time()


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, count: int, vocab: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(3, vocab, (count, SEQUENCE), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def main() -> None:
    model_dir, output_dir = sys.argv[1], sys.argv[2]
    max_steps, warmup = int(sys.argv[3]), int(sys.argv[4])
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    args = TrainingArguments(
        output_dir=output_dir,
        max_steps=max_steps,
        per_device_train_batch_size=BATCH,
        learning_rate=1e-4,
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        use_cpu=True,  # else, without accelerators, no process group (1 process per rank)
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
        seed=0,
    )
    clock = StepClock()
    samples = max_steps * BATCH * args.world_size
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=RandomTokens(samples, model.config.vocab_size),
        callbacks=[clock],
    )
    trainer.train()
    if args.process_index != 0:
        return
    measured = clock.ends[warmup - 1 :] if warmup > 0 else []
    cpu = clock.cpu_ends[warmup - 1 :] if warmup > 0 else []
    steps_per_s = cpu_s_per_step = None
    if len(measured) > 1:
        steps_per_s = (len(measured) - 1) / (measured[-1] - measured[0])
        cpu_s_per_step = (cpu[-1] - cpu[0]) / (len(cpu) - 1)
    accelerator = type(trainer.accelerator)
    print(
        json.dumps(
            {
                "steps": len(clock.ends),
                "steps_per_s": steps_per_s,
                "cpu_s_per_step": cpu_s_per_step,
                "first_step_end": clock.first_step_end,
                "first_step_cpu_s": clock.first_step_cpu,
                "world_size": args.world_size,
                "accelerator": f"{accelerator.__module__}.{accelerator.__qualname__}",
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
    end_process_group()  # after the figures (process_exit.py says why)
