"""Worker of the pipeline-parallel tests, run on real gloo processes by
``accel_testing.run_workers``: ``pp_workers.py OUT LAYOUT MODEL SCHEDULE [options]``.

LAYOUT is the ``ParallelismConfig``: ``pp2`` (2 processes), ``pp2xshard2`` (4 processes: each
stage sharded with FSDP2 over 2), ``pp4`` (4 processes, one layer each) or ``whole`` (1
process, no pipeline: a pipeline checkpoint loaded whole). MODEL is ``stack`` (a plain PyTorch
model of 4 layers and a head, split by a ``split_fn``) or ``llama`` (a tiny transformers Llama
of 4 decoder layers, split by accel). SCHEDULE is ``GPipe`` or ``1F1B``.

Every process trains with ``accelerator.forward_backward``; every process also trains the whole
model in one process of plain PyTorch over the same global batches (the reference) and reports
the largest difference of the weights. Rank 0 writes ``OUT/result.json``. Everything is
float64.

Options: ``--steps N``; ``--accumulate K`` (gradient accumulation steps); ``--microbatches M``;
``--save DIR`` (``save_state`` and ``save_model`` after training; rank 0 reads the saved model
back); ``--load DIR`` (``load_state`` before training, which goes on from the step saved
there); ``--checkpoint-every K`` with ``--die-after K`` (SIGKILL every process after that step)
or ``--resume``; ``--mixed-precision bf16``; ``--refusals`` (report what
``accelerator.backward``, the model called outside the schedule and a batch that does not split
into the micro-batches raise).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from nd_job_reports import (
    checkpoint_or_die,
    every_process,
    mesh_names,
    save_if_asked,
    saved_model_report,
)
from torch.utils.data import DataLoader, TensorDataset

from accel_backends import FullyShardedDataParallelPlugin, ParallelismConfig
from accel_backends.pipeline_config import PipelineParallelConfig
from accel_core import Accelerator
from accel_core.configuration import ProjectConfiguration

LAYOUTS = {
    "pp2": {"pp_size": 2},
    "pp2xshard2": {"pp_size": 2, "dp_shard_size": 2},
    "pp4": {"pp_size": 4},
    "whole": {},
}
GLOBAL_BATCH = 8
SAMPLES = 48
SEQUENCE = 6
VOCAB = 64
LR = 0.01
MAX_NORM = 0.5
WIDTH = 12


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


class Stack(torch.nn.Module):
    """Four layers and a classifier head."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Block() for _ in range(4))
        self.head = torch.nn.Linear(WIDTH, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class StackStage(torch.nn.Module):
    def __init__(self, layers: list[torch.nn.Module], head: torch.nn.Module | None) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x if self.head is None else self.head(x)


def split_stack(model: torch.nn.Module, stage_index: int, num_stages: int) -> torch.nn.Module:
    """The user's split: an equal share of the layers, the head on the last stage."""
    per = len(model.layers) // num_stages
    layers = list(model.layers[stage_index * per : (stage_index + 1) * per])
    return StackStage(layers, model.head if stage_index == num_stages - 1 else None)


def llama_path(out: Path) -> Path:
    """A tiny Llama with random weights, saved once by rank 0 (float64)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    path = out / "llama"
    if int(os.environ.get("RANK", "0")) == 0 and not (path / "config.json").exists():
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=SEQUENCE,
            tie_word_embeddings=False,
        )
        LlamaForCausalLM(config).to(torch.float64).save_pretrained(path)
    if dist.is_initialized():
        dist.barrier()
    return path


def new_model(kind: str, path: Path | None) -> torch.nn.Module:
    if kind == "stack":
        torch.manual_seed(0)
        return Stack()
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(path, dtype=torch.float64)


def dataset(kind: str) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    if kind == "stack":
        features = torch.randn(SAMPLES, WIDTH, generator=generator)
        labels = torch.randint(0, 3, (SAMPLES,), generator=generator)
        return TensorDataset(features, labels)
    tokens = torch.randint(0, VOCAB, (SAMPLES, SEQUENCE), generator=generator)
    return TensorDataset(tokens, tokens.clone())


def loss_fn(outputs: object, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of a classifier's logits, or a causal LM's next-token loss (its outputs
    are a ModelOutput outside the pipeline, the logits on its last stage)."""
    logits = getattr(outputs, "logits", outputs)
    if logits.dim() == 3:  # causal LM: predict token t+1 from the tokens up to t
        logits, target = logits[:, :-1].flatten(0, 1), target[:, 1:].flatten()
    return torch.nn.functional.cross_entropy(logits, target)


def inputs_of(kind: str, batch: torch.Tensor) -> object:
    return batch if kind == "stack" else {"input_ids": batch}


def reference(kind: str, path: Path | None, steps: int, accumulate: int) -> dict[str, object]:
    """One process of plain PyTorch over the same global batches."""
    from accel_core.strategies.step import call_model

    model = new_model(kind, path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    losses, norms = [], []
    loader = DataLoader(dataset(kind), batch_size=GLOBAL_BATCH)
    for step, (inputs, labels) in enumerate(loader):
        if step >= steps * accumulate:
            break
        loss = loss_fn(call_model(model, inputs_of(kind, inputs)), labels)
        (loss / accumulate).backward()
        losses.append(loss.item())
        if (step + 1) % accumulate == 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
            optimizer.step()
            optimizer.zero_grad()
    return {
        "losses": losses,
        "norms": norms,
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
    }


def refused_calls(accelerator: Accelerator, model: torch.nn.Module, kind: str) -> dict[str, str]:
    """What ``accelerator.backward`` under pp, the model called on its own, and a batch of 3
    samples (4 micro-batches) say; none changes anything (no gradient appears)."""
    found = {}
    try:
        accelerator.backward(torch.zeros((), requires_grad=True))
    except RuntimeError as error:
        found["backward"] = str(error)
    inputs, labels = dataset(kind)[:3]
    try:
        model(inputs)
    except RuntimeError as error:
        found["forward"] = str(error)
    try:
        accelerator.forward_backward(model, inputs_of(kind, inputs), loss_fn, labels)
    except ValueError as error:
        found["uneven"] = str(error)
    assert all(p.grad is None for p in model.parameters())
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("layout", choices=sorted(LAYOUTS))
    parser.add_argument("model", choices=("stack", "llama"))
    parser.add_argument("schedule", choices=("GPipe", "1F1B"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--load", type=Path)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--die-after", type=int, default=-1)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--refusals", action="store_true")
    parser.add_argument("--mixed-precision", default="no", choices=("no", "bf16"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_default_dtype(torch.float64)
    kind = args.model
    handler = PipelineParallelConfig(
        split_fn=split_stack if kind == "stack" else None,
        schedule=args.schedule,
        microbatches=args.microbatches,
    )
    sizes = LAYOUTS[args.layout]
    automatic = bool(args.checkpoint_every) or args.resume
    project = ProjectConfiguration(
        project_dir=str(args.out / "project"), automatic_checkpoint_naming=automatic
    )
    accelerator = Accelerator(
        parallelism_config=ParallelismConfig(**sizes, pp_handler=handler) if sizes else None,
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2),
        project_config=project,
        gradient_accumulation_steps=args.accumulate,
        mixed_precision=args.mixed_precision,
    )
    path = llama_path(args.out) if kind == "llama" else None
    data_parallel = sizes.get("dp_shard_size", 1)
    loader = DataLoader(dataset(kind), batch_size=GLOBAL_BATCH // data_parallel)
    model = new_model(kind, path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    start = 0  # batches done (accelerator.step counts the batches accumulate() saw)
    if args.load is not None or args.resume:
        accelerator.load_state(None if args.resume else str(args.load))
        start = accelerator.step
    refusals = refused_calls(accelerator, model, kind) if args.refusals else {}
    losses, norms, gathered = [], [], []
    batches = accelerator.skip_first_batches(loader, start) if start else loader
    for index, (inputs, labels) in enumerate(batches, start=start):
        if index >= args.steps * args.accumulate:
            break
        with accelerator.accumulate(model):
            loss = accelerator.forward_backward(model, inputs_of(kind, inputs), loss_fn, labels)
            losses.append(float(accelerator.reduce(loss.detach(), "mean")))
            if index == start:  # each data-parallel process's loss, on every stage
                gathered = accelerator.gather_for_metrics(loss.detach().reshape(1)).tolist()
            if accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
            optimizer.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            steps_done = (index + 1) // args.accumulate
            checkpoint_or_die(accelerator, steps_done, args.checkpoint_every, args.die_after)
    state = {k: v.detach().clone() for k, v in accelerator.get_state_dict(model).items()}
    save_if_asked(accelerator, model, args.save)
    expected = reference(kind, path, args.steps, args.accumulate)
    facts = {
        "rank": accelerator.process_index,
        "mesh": mesh_names(accelerator),
        # the parameters this process's stage holds; ``state`` is the whole model's, gathered
        "gathered_first_losses": gathered,
        "keys": sorted(name for name, _ in accelerator.unwrap_model(model).named_parameters()),
        "state_keys": sorted(state),
        "weight_differences": {
            k: (v - expected["state"][k]).abs().max().item() for k, v in state.items()
        },
    }
    all_facts = every_process(facts)
    if accelerator.is_main_process:
        result = {
            **saved_model_report(args.save, expected["state"]),
            "losses": losses,
            "reference_losses": expected["losses"][start:],
            "norms": norms,
            "reference_norms": expected["norms"][start // args.accumulate :],
            "reference_keys": sorted(expected["state"]),
            "processes": all_facts,
            "refusals": refusals,
        }
        (args.out / "result.json").write_text(json.dumps(result))
    accelerator.end_training()


if __name__ == "__main__":
    main()
