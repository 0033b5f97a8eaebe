"""Worker of the expert-parallel tests, run on real gloo processes by
``accel_testing.run_workers``: ``ep_workers.py OUT LAYOUT MODEL [options]``.

LAYOUT is the ``ParallelismConfig``: ``ep2`` (2 processes: dp_shard 2, the experts split over
both), ``ep2xshard2`` (4 processes: dp_shard 4 = ep 2 x 2, each process's experts sharded with
FSDP2 over the 2 holding the same ones), ``ep2xtp2`` (4 processes: dp_shard 2 = ep 2, tp 2),
``ep2xreplicate2`` (4 processes: HSDP, dp_replicate 2 x dp_shard 2 = ep 2) or ``whole`` (1
process: no expert parallelism; an ep checkpoint loaded whole). MODEL is ``plain``
(a plain PyTorch mixture of experts: 4 experts, 2 per token, found by accel's default search)
or ``qwen`` (a tiny transformers Qwen3-MoE of 2 layers, a dense one and one of 4 experts, its
load-balancing loss in the loss).

Every process also trains the whole model in one process of plain PyTorch over the same global
batches (the reference: each step's loss is the mean of the data-parallel shards' losses, as the
processes compute it) and reports the largest difference of the weights. Rank 0 writes
``OUT/result.json``. Everything is float64.

Options: ``--steps N``; ``--save DIR`` (``save_state`` and ``save_model`` after training);
``--load DIR`` (``load_state`` before training, which goes on from the step saved there);
``--checkpoint-every K`` with ``--die-after K`` (SIGKILL every process after that step) or
``--resume``.
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
from accel_backends.tensor_parallel_config import TorchTensorParallelConfig
from accel_core import Accelerator
from accel_core.configuration import ProjectConfiguration

LAYOUTS = {
    "ep2": {"dp_shard_size": 2, "ep_size": 2},
    "ep2xshard2": {"dp_shard_size": 4, "ep_size": 2},
    "ep2xtp2": {"dp_shard_size": 2, "tp_size": 2, "ep_size": 2},
    "ep2xreplicate2": {"dp_replicate_size": 2, "dp_shard_size": 2, "ep_size": 2},
    "whole": {},
}
GLOBAL_BATCH = 8
SAMPLES = 48
SEQUENCE = 6
VOCAB = 64
WIDTH = 8
EXPERTS = 4
LR = 0.01
MAX_NORM = 0.5


class Experts(torch.nn.Module):
    """``num_experts`` two-layer perceptrons, stacked: transformers' experts contract."""

    def __init__(self) -> None:
        super().__init__()
        self.num_experts = EXPERTS
        self.w_in = torch.nn.Parameter(torch.randn(EXPERTS, WIDTH, 2 * WIDTH) / WIDTH**0.5)
        self.w_out = torch.nn.Parameter(torch.randn(EXPERTS, 2 * WIDTH, WIDTH) / WIDTH**0.5)

    def forward(
        self, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        output = torch.zeros_like(hidden)
        for expert in range(self.num_experts):
            token, choice = torch.where(top_k_index == expert)
            if len(token):
                computed = torch.tanh(hidden[token] @ self.w_in[expert]) @ self.w_out[expert]
                output = output.index_add(0, token, computed * top_k_weights[token, choice, None])
        return output


class MixtureOfExperts(torch.nn.Module):
    """A router (its 2 best experts per token, weights renormalised) and the experts."""

    def __init__(self) -> None:
        super().__init__()
        self.router = torch.nn.Linear(WIDTH, EXPERTS, bias=False)
        self.experts = Experts()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, WIDTH)
        weights, index = torch.topk(torch.softmax(self.router(flat), dim=-1), 2, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return x + self.experts(flat, index, weights).view_as(x)


class PlainMoE(torch.nn.Module):
    """Features in, 3 classes out: a dense part tensor parallelism splits, then the experts."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(WIDTH, 2 * WIDTH)
        self.down = torch.nn.Linear(2 * WIDTH, WIDTH)
        self.moe = MixtureOfExperts()
        self.head = torch.nn.Linear(WIDTH, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(torch.tanh(self.up(x)))
        return self.head(self.moe(x)).mean(dim=1)


def parallelize_dense(model: torch.nn.Module, tp_mesh: object) -> None:
    """The plain model's tensor-parallel plan: its dense pair split column- then row-wise (the
    router, head and experts left to accel: replicated, and split over ep)."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    parallelize_module(model, tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})


def parallelize_dense_layer(model: torch.nn.Module, tp_mesh: object) -> None:
    """The Qwen model's tensor-parallel plan: its dense layer's MLP (layer 0) split column- then
    row-wise; attention, embeddings, norms, routers and head left to accel (replicated), the
    experts (layer 1) to expert parallelism."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mlp = "model.layers.0.mlp"
    plan = {
        f"{mlp}.gate_proj": ColwiseParallel(),
        f"{mlp}.up_proj": ColwiseParallel(),
        f"{mlp}.down_proj": RowwiseParallel(),
    }
    parallelize_module(model, tp_mesh, plan)


def qwen_path(out: Path) -> Path:
    """A tiny Qwen3-MoE with random weights, saved once by rank 0 (float64, eager experts:
    transformers' grouped kernel takes no float64)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    path = out / "qwen"
    if int(os.environ.get("RANK", "0")) == 0 and not (path / "config.json").exists():
        torch.manual_seed(0)
        config = Qwen3MoeConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            intermediate_size=32,
            moe_intermediate_size=8,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_experts=EXPERTS,
            num_experts_per_tok=2,
            mlp_only_layers=[0],  # a dense layer (what tensor parallelism splits), then experts
            max_position_embeddings=SEQUENCE,
            output_router_logits=True,
            tie_word_embeddings=False,
        )
        Qwen3MoeForCausalLM(config).to(torch.float64).save_pretrained(path)
    if dist.is_initialized():
        dist.barrier()
    return path


def new_model(kind: str, path: Path | None) -> torch.nn.Module:
    if kind == "plain":
        torch.manual_seed(0)
        return PlainMoE()
    from transformers import Qwen3MoeForCausalLM

    return Qwen3MoeForCausalLM.from_pretrained(
        path, dtype=torch.float64, experts_implementation="eager"
    )


def dataset(kind: str) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    if kind == "plain":
        features = torch.randn(SAMPLES, SEQUENCE, WIDTH, generator=generator)
        labels = torch.randint(0, 3, (SAMPLES,), generator=generator)
        return TensorDataset(features, labels)
    tokens = torch.randint(0, VOCAB, (SAMPLES, SEQUENCE), generator=generator)
    return TensorDataset(tokens, tokens.clone())


def losses_of(kind: str, model: torch.nn.Module, inputs: torch.Tensor, labels: torch.Tensor):
    """The loss to train on and the load-balancing loss (None for the plain model)."""
    if kind == "plain":
        return torch.nn.functional.cross_entropy(model(inputs), labels), None
    outputs = model(input_ids=inputs, labels=labels)
    return outputs.loss, outputs.aux_loss


def reference(kind: str, path: Path | None, steps: int, shards: int) -> dict[str, object]:
    """One process of plain PyTorch over the same global batches, each step's loss the mean of
    its ``shards`` data-parallel shards' losses."""
    model = new_model(kind, path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    losses, aux_losses, norms = [], [], []
    loader = DataLoader(dataset(kind), batch_size=GLOBAL_BATCH)
    for step, (inputs, labels) in enumerate(loader):
        if step >= steps:
            break
        parts = [
            losses_of(kind, model, i, t)
            for i, t in zip(inputs.chunk(shards), labels.chunk(shards), strict=True)
        ]
        loss = sum(p[0] for p in parts) / shards
        loss.backward()
        losses.append(loss.item())
        if kind != "plain":
            aux_losses.append(float(sum(p[1] for p in parts) / shards))
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
        optimizer.step()
        optimizer.zero_grad()
    return {
        "losses": losses,
        "aux_losses": aux_losses,
        "norms": norms,
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
    }


def expert_layout(model: torch.nn.Module) -> dict[str, object]:
    """How this process holds the first experts module's parameters after ``prepare``."""
    for name, parameter in model.named_parameters():
        if "experts" in name:
            return {
                "name": name,
                "mesh": list(parameter.device_mesh.mesh_dim_names or ()),
                "placements": [str(p) for p in parameter.placements],
                "local_rows": parameter.to_local().shape[0],
            }
    return {}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("layout", choices=sorted(LAYOUTS))
    parser.add_argument("model", choices=("plain", "qwen"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--load", type=Path)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--die-after", type=int, default=-1)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_default_dtype(torch.float64)
    kind = args.model
    sizes = dict(LAYOUTS[args.layout])
    if sizes.get("tp_size", 1) > 1:
        plan = parallelize_dense if kind == "plain" else parallelize_dense_layer
        sizes["tp_handler"] = TorchTensorParallelConfig(parallelize_fn=plan)
    automatic = bool(args.checkpoint_every) or args.resume
    project = ProjectConfiguration(
        project_dir=str(args.out / "project"), automatic_checkpoint_naming=automatic
    )
    accelerator = Accelerator(
        parallelism_config=ParallelismConfig(**sizes) if sizes else None,
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2),
        project_config=project,
    )
    path = qwen_path(args.out) if kind == "qwen" else None
    shards = sizes.get("dp_replicate_size", 1) * sizes.get("dp_shard_size", 1)
    loader = DataLoader(dataset(kind), batch_size=GLOBAL_BATCH // shards)
    model = new_model(kind, path)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    # every process's experts kept through prepare: gathered, the model is the one given
    prepared = accelerator.get_state_dict(model)
    kept = max((v - before[k]).abs().max().item() for k, v in prepared.items())
    start = 0
    if args.load is not None or args.resume:
        accelerator.load_state(None if args.resume else str(args.load))
        start = accelerator.step
    losses, aux_losses, norms = [], [], []
    batches = accelerator.skip_first_batches(loader, start) if start else loader
    for index, (inputs, labels) in enumerate(batches, start=start):
        if index >= args.steps:
            break
        with accelerator.accumulate(model):
            loss, aux = losses_of(kind, model, inputs, labels)
            accelerator.backward(loss)
            losses.append(float(accelerator.reduce(loss.detach(), "mean")))
            if aux is not None:  # what a script logs: the mean over the data-parallel processes
                aux_losses.append(float(accelerator.reduce(aux.detach(), "mean")))
            norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
            optimizer.step()
            optimizer.zero_grad()
        checkpoint_or_die(accelerator, index + 1, args.checkpoint_every, args.die_after)
    state = {k: v.detach().clone() for k, v in accelerator.get_state_dict(model).items()}
    save_if_asked(accelerator, model, args.save)
    expected = reference(kind, path, args.steps, shards)
    facts = {
        "rank": accelerator.process_index,
        "mesh": mesh_names(accelerator),
        "experts": expert_layout(accelerator.unwrap_model(model)),
        "kept_through_prepare": kept,
        "state_keys": sorted(state),
        "weight_difference": max(
            (v - expected["state"][k]).abs().max().item() for k, v in state.items()
        ),
    }
    all_facts = every_process(facts)
    if accelerator.is_main_process:
        result = {
            **saved_model_report(args.save, expected["state"]),
            "losses": losses,
            "reference_losses": expected["losses"][start:],
            "aux_losses": aux_losses,
            "reference_aux_losses": expected["aux_losses"][start:],
            "norms": norms,
            "reference_norms": expected["norms"][start:],
            "reference_keys": sorted(expected["state"]),
            "processes": all_facts,
        }
        (args.out / "result.json").write_text(json.dumps(result))
    accelerator.end_training()


if __name__ == "__main__":
    main()
