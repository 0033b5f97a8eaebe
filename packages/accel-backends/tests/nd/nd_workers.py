"""Worker of the ND-parallel tests (tensor parallelism with FSDP2), run on real gloo processes by
``accel_testing.run_workers``: ``nd_workers.py OUT LAYOUT MODEL [options]``.

LAYOUT is the ``ParallelismConfig``: ``shard2xtp2``, ``replicate2xtp2`` (4 processes), ``tp2``
(2 processes), or ``launch`` (the sizes ``accel launch`` passed). MODEL is ``mlp`` (a plain
PyTorch model split by a ``parallelize_module`` plan given as ``parallelize_fn``), ``llama`` (a
transformers Llama loaded whole, split by the same kind of plan) or ``llama-recipe``
(Accelerate's recipe: ``from_pretrained(path, tp_plan="auto", tp_size=...,
device_mesh=accelerator.torch_device_mesh)``; transformers builds its own mesh, so only where
tp_size is the number of processes), or ``llama-distributed`` (transformers splits and shards it
itself: ``DistributedConfig(tp_size=..., fsdp_size=...)``; ``prepare`` leaves the sharding).

Every process also trains the same model whole, in one process of plain PyTorch over the same
global batches (the reference); rank 0 writes ``OUT/result.json`` with both runs' losses, gradient
norms and weights' largest difference, and the gathered evaluation. Everything is float64.

Options: ``--steps N``; ``--save DIR`` (``save_state`` and ``save_model`` after training);
``--load DIR`` (``load_state`` before training, which goes on from the step saved there);
``--checkpoint-every K`` with ``--die-after K`` (SIGKILL every process after that step) or
``--resume`` (continue from the latest automatic checkpoint in OUT/project); ``--refusals``
(first prepare two models ``prepare`` refuses, and report its messages).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from accel_backends import (
    FullyShardedDataParallelPlugin,
    ParallelismConfig,
    TorchTensorParallelConfig,
)
from accel_core import Accelerator
from accel_core.configuration import ProjectConfiguration

LAYOUTS = {
    "shard2xtp2": {"dp_shard_size": 2, "tp_size": 2},
    "replicate2xtp2": {"dp_replicate_size": 2, "tp_size": 2},
    "tp2": {"tp_size": 2},
}
GLOBAL_BATCH = 8
SEQUENCE = 8
VOCAB = 96
LR = 0.01
MAX_NORM = 1.0
#: The training set: 8 global batches, the same whichever run reads it.
SAMPLES = 64


class MLP(torch.nn.Module):
    """Normalise, widen, narrow, classify: the middle pair is what tensor parallelism splits."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.down(torch.relu(self.up(self.norm(x)))))


def mlp_plan(model: torch.nn.Module, tp_mesh: object) -> None:
    """The ``parallelize_fn`` of the plain model: Megatron's column-then-row split."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    parallelize_module(model, tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})


def llama_plan(model: torch.nn.Module, tp_mesh: object) -> None:
    """The ``parallelize_fn`` of a transformers Llama loaded whole: attention heads and MLP
    columns split, their output projections split by rows (embeddings, norms and the head stay
    whole: ``prepare`` replicates them over the tp mesh)."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    column, row = ColwiseParallel(), RowwiseParallel()
    plan = {
        "model.layers.*.self_attn.q_proj": column,
        "model.layers.*.self_attn.k_proj": column,
        "model.layers.*.self_attn.v_proj": column,
        "model.layers.*.self_attn.o_proj": row,
        "model.layers.*.mlp.gate_proj": column,
        "model.layers.*.mlp.up_proj": column,
        "model.layers.*.mlp.down_proj": row,
    }
    parallelize_module(model, tp_mesh, plan)


def tiny_llama() -> torch.nn.Module:
    """A tiny random Llama (seeded): 2 layers, 4 heads, 2 key-value heads, width 32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config)


def llama_path(out: Path) -> Path:
    """:func:`tiny_llama` saved with ``save_pretrained`` (written once, by rank 0)."""
    path = out.parent / "llama"
    if dist.get_rank() == 0 and not (path / "config.json").exists():
        tiny_llama().save_pretrained(path)
    dist.barrier()
    return path


def new_model(kind: str, path: Path | None, accelerator: Accelerator | None) -> torch.nn.Module:
    """The model whole (``accelerator`` None) or as the recipe loads it."""
    if kind == "mlp":
        torch.manual_seed(0)
        return MLP()
    from transformers import LlamaForCausalLM

    if kind == "llama-recipe" and accelerator is not None:
        config = accelerator.parallelism_config
        return LlamaForCausalLM.from_pretrained(
            path,
            dtype=torch.float64,
            tp_size=config.tp_size,
            tp_plan="auto",
            device_mesh=accelerator.torch_device_mesh,
        )
    if kind == "llama-distributed" and accelerator is not None:
        from transformers import DistributedConfig

        config = accelerator.parallelism_config
        distributed = DistributedConfig(tp_size=config.tp_size, fsdp_size=config.dp_shard_size)
        return LlamaForCausalLM.from_pretrained(
            path, dtype=torch.float64, distributed_config=distributed
        )
    return LlamaForCausalLM.from_pretrained(path, dtype=torch.float64)


def dataset(kind: str, samples: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    if kind == "mlp":
        features = torch.randn(samples, 16, generator=generator)
        labels = torch.randint(0, 4, (samples,), generator=generator)
        return TensorDataset(features, labels)
    tokens = torch.randint(0, VOCAB, (samples, SEQUENCE), generator=generator)
    return TensorDataset(tokens, tokens.clone())


def loss_of(kind: str, model: torch.nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    inputs, labels = batch
    if kind == "mlp":
        return torch.nn.functional.cross_entropy(model(inputs), labels)
    return model(input_ids=inputs, labels=labels).loss


def predictions_of(kind: str, model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        if kind == "mlp":
            return model(inputs)
        return model(input_ids=inputs).logits[:, -1]


def reference(kind: str, path: Path | None, steps: int, samples: int) -> dict[str, object]:
    """One process of plain PyTorch over the same global batches."""
    model = new_model(kind, path, None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    losses, norms = [], []
    for step, batch in enumerate(DataLoader(dataset(kind, samples), batch_size=GLOBAL_BATCH)):
        if step >= steps:
            break
        loss = loss_of(kind, model, batch)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
    evaluation = dataset(kind, 10).tensors[0]
    return {
        "losses": losses,
        "norms": norms,
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "predictions": predictions_of(kind, model, evaluation),
    }


def refused_models(accelerator: Accelerator) -> dict[str, str]:
    """What ``prepare`` says to a model it can't split: one whole without a plan, and one split
    over other groups of processes than the ``tp`` groups of ``accelerator.torch_device_mesh``."""
    from torch.distributed.device_mesh import init_device_mesh

    config = accelerator.parallelism_config
    found = {}
    planned, config.tp_handler = config.tp_handler, TorchTensorParallelConfig()
    try:
        accelerator.prepare(MLP())
    except NotImplementedError as error:
        found["whole"] = str(error)
    finally:
        config.tp_handler = planned
    # tp groups {0, 2} and {1, 3}, where the Accelerator's are {0, 1} and {2, 3}
    own = init_device_mesh("cpu", (2, 2), mesh_dim_names=("tp", "other"))
    split = MLP()
    mlp_plan(split, own["tp"])
    try:
        accelerator.prepare(split)
    except ValueError as error:
        found["own_mesh"] = str(error)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("layout", choices=[*sorted(LAYOUTS), "launch"])
    parser.add_argument("model", choices=("mlp", "llama", "llama-recipe", "llama-distributed"))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--load", type=Path)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--die-after", type=int, default=-1)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--refusals", action="store_true")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    kind = args.model
    plan = {"mlp": mlp_plan, "llama": llama_plan}.get(kind)
    handler = TorchTensorParallelConfig(parallelize_fn=plan) if plan else None
    automatic = bool(args.checkpoint_every) or args.resume
    project = ProjectConfiguration(
        project_dir=str(args.out / "project"), automatic_checkpoint_naming=automatic
    )
    if args.layout == "launch":
        # `accel launch --use_parallelism_config ...`: the Accelerator reads the sizes from the
        # launch; nothing names the strategy
        accelerator = Accelerator(project_config=project)
    else:
        accelerator = Accelerator(
            parallelism_config=ParallelismConfig(**LAYOUTS[args.layout], tp_handler=handler),
            fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2),
            project_config=project,
        )
    refusals = refused_models(accelerator) if args.refusals else {}
    path = llama_path(args.out) if kind != "mlp" else None
    samples = SAMPLES
    data_parallel = accelerator.parallelism_config.data_parallel_size
    loader = DataLoader(dataset(kind, samples), batch_size=GLOBAL_BATCH // data_parallel)
    evaluation = DataLoader(dataset(kind, 10), batch_size=2)
    model = new_model(kind, path, accelerator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    model, optimizer, loader, evaluation = accelerator.prepare(model, optimizer, loader, evaluation)
    start = 0
    if args.load is not None or args.resume:
        # the latest automatic checkpoint when resuming; training goes on from its step
        accelerator.load_state(None if args.resume else str(args.load))
        start = accelerator.step
    losses, norms, seen = [], [], []
    batches = accelerator.skip_first_batches(loader, start) if start else loader
    for step, batch in enumerate(batches, start=start):
        if step >= args.steps:
            break
        seen.append(batch[0].sum().item())
        loss = loss_of(kind, model, batch)
        accelerator.backward(loss)
        norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach(), "mean")))
        accelerator.step = step + 1
        if args.checkpoint_every and (step + 1) % args.checkpoint_every == 0:
            accelerator.save_state()
        if step + 1 == args.die_after:
            dist.barrier()
            os.kill(os.getpid(), signal.SIGKILL)
    state = accelerator.get_state_dict(model)
    model.eval()
    gathered = []
    for inputs, _ in evaluation:
        gathered.append(accelerator.gather_for_metrics(predictions_of(kind, model, inputs)))
    predictions = torch.cat(gathered)
    if args.save is not None:
        accelerator.save_state(str(args.save / "state"))
        accelerator.save_model(model, str(args.save / "model"), safe_serialization=True)
    facts = {
        "rank": accelerator.process_index,
        "mesh": list(accelerator.torch_device_mesh.mesh_dim_names),
        "mesh_shape": list(accelerator.torch_device_mesh.shape),
        "strategy": type(accelerator.strategy).__name__,
        "tp_rank": accelerator.tensor_parallel_rank,
        "dp_rank": accelerator.data_parallel_rank,
        "shard_rank": accelerator.data_parallel_shard_rank,
        "first_feature_sums": seen,
    }
    all_facts = [None] * dist.get_world_size()
    dist.all_gather_object(all_facts, facts)
    if accelerator.is_main_process:
        expected = reference(kind, path, args.steps, samples)
        weights = {k: (v - expected["state"][k]).abs().max().item() for k, v in state.items()}
        result = {
            "losses": losses,
            "reference_losses": expected["losses"][start:],
            "norms": norms,
            "reference_norms": expected["norms"][start:],
            "weight_differences": weights,
            "keys_match": sorted(state) == sorted(expected["state"]),
            "predictions_shape": list(predictions.shape),
            "prediction_difference": (predictions - expected["predictions"]).abs().max().item(),
            "processes": all_facts,
            "refusals": refusals,
        }
        torch.save(state, args.out / "weights.pt")
        (args.out / "result.json").write_text(json.dumps(result))
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
