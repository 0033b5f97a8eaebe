"""Time one training step of expert parallelism with FSDP2 (dp_shard 4, ep 2) on 4 CPU
processes.

Run under torchrun with 4 processes: ``ep_step.py IMPLS STEPS WARMUP``. IMPLS is a comma list of:

- ``accel``: ``Accelerator(parallelism_config=ParallelismConfig(dp_shard_size=4, ep_size=2),
  fsdp_plugin=...)`` (each ``MoEBlock`` its own FSDP unit; accel finds the experts and makes
  each an FSDP unit over the processes holding it); the step is ``next(loader)``, ``zero_grad``,
  forward, MSE loss, ``accelerator.backward``, ``accelerator.clip_grad_norm_``,
  ``optimizer.step()``.
- ``raw``: the same by hand with torch alone: ``init_device_mesh("cpu", (2, 2),
  mesh_dim_names=("dp_shard_mod_ep", "dp_shard_in_ep"))`` with ``dp_shard`` flattened over both;
  each block's experts cut to this process's half by hand (``DTensor.from_local``, ``Shard(0)``
  over ``dp_shard_in_ep``), their forward replaced by a hand-written dispatch (the counts, the
  expert indices and the tokens exchanged with ``all_to_all_single``; torch's functional
  ``all_to_all_single_autograd`` for the tokens both ways), ``fully_shard`` on the experts over
  ``dp_shard_mod_ep`` (``set_gradient_divide_factor(4)``: the average over every process; with
  ``set_force_sum_reduction_for_comms``, as gloo has no ``PREMUL_SUM``), on
  each block and on the root over ``dp_shard``; the gradient norm taken per mesh and combined,
  ``clip_grads_with_norm_``, AdamW; a batch sampler of its rank's batches.

The model (``moe_net``, one seed): ``DEPTH`` residual blocks of ``EXPERTS`` experts (Linear
WIDTH -> HIDDEN, GELU, Linear back), 2 per token, and a Linear head, float32; MSE loss;
``BATCH`` x ``SEQUENCE`` tokens per process per step.

Every timed step starts after a barrier; its time is the longest of the 4 processes'. The steps
of the implementations are interleaved, alternating which goes first. Rank 0 prints one JSON
object: {impl: median seconds per step, "runs", "losses", "norms", "parameters"}.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator

import moe_net
import torch
import torch.distributed as dist
from interleaved_steps import interleaved, report_and_end
from moe_net import MoEBlock, MoENet, expert_outputs
from torch.utils.data import DataLoader, TensorDataset

EXPERTS, WIDTH, HIDDEN, DEPTH, TOP_K = 8, 128, 256, 2, 2
BATCH, SEQUENCE = 16, 16
DP, EP = 4, 2
LR, MAX_NORM = 1e-4, 1.0


def new_model() -> MoENet:
    return moe_net.new_model(EXPERTS, WIDTH, HIDDEN, DEPTH, TOP_K)


def dataset(steps: int) -> TensorDataset:
    rows = steps * DP * BATCH
    inputs = torch.randn(rows, SEQUENCE, WIDTH, generator=torch.Generator().manual_seed(1))
    targets = torch.randn(rows, SEQUENCE, WIDTH, generator=torch.Generator().manual_seed(2))
    return TensorDataset(inputs, targets)  # the first rows alike whatever the number of steps


Step = Callable[[], tuple[torch.Tensor, torch.Tensor]]


def make_accel(steps: int) -> Step:
    from accel_backends import FullyShardedDataParallelPlugin, ParallelismConfig
    from accel_core import Accelerator

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["MoEBlock"],
        reshard_after_forward=True,
    )
    accelerator = Accelerator(
        parallelism_config=ParallelismConfig(dp_shard_size=DP, ep_size=EP), fsdp_plugin=plugin
    )
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loader = DataLoader(dataset(steps), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = iter(loader)

    def step():
        inputs, targets = next(batches)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        norm = accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        return accelerator.reduce(loss.detach(), "mean"), norm

    return step


def _raw_dispatch(group: dist.ProcessGroup, local: int) -> Callable[..., torch.Tensor]:
    """An experts forward written by hand: tokens to their expert's process and back."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

    def forward(experts, hidden_states, top_k_index, top_k_weights):
        tokens, k = top_k_index.shape
        choice = top_k_index.reshape(-1)
        destination = choice // local
        order = torch.argsort(destination, stable=True)
        send = torch.bincount(destination, minlength=EP)
        receive = torch.empty_like(send)
        dist.all_to_all_single(receive, send, group=group)
        send_sizes, receive_sizes = send.tolist(), receive.tolist()
        index = (choice % local)[order]
        received_index = index.new_empty(sum(receive_sizes))
        dist.all_to_all_single(received_index, index, receive_sizes, send_sizes, group=group)
        outgoing = hidden_states.repeat_interleave(k, dim=0)[order]
        incoming = wait_tensor(
            all_to_all_single_autograd(outgoing, receive_sizes, send_sizes, group)
        )
        ones = torch.ones(len(received_index), 1, dtype=incoming.dtype)
        computed = expert_outputs(
            experts.w_in.to_local(),
            experts.w_out.to_local(),
            incoming,
            received_index[:, None],
            ones,
            local,
        )
        back = wait_tensor(all_to_all_single_autograd(computed, send_sizes, receive_sizes, group))
        unsorted = back[torch.argsort(order)].view(tokens, k, -1)
        return (unsorted * top_k_weights[..., None]).sum(dim=1)

    return forward


def make_raw(steps: int) -> Step:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Shard

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    mesh = init_device_mesh(
        "cpu", (DP // EP, EP), mesh_dim_names=("dp_shard_mod_ep", "dp_shard_in_ep")
    )
    shard_mesh = mesh[("dp_shard_mod_ep", "dp_shard_in_ep")]._flatten("dp_shard")
    ep_mesh = mesh["dp_shard_in_ep"]
    local, coordinate = EXPERTS // EP, ep_mesh.get_local_rank()
    model = new_model()
    for block in model.blocks:
        assert isinstance(block, MoEBlock)
        experts = block.experts
        for name in ("w_in", "w_out"):
            rows = getattr(experts, name).detach()[coordinate * local : (coordinate + 1) * local]
            split = DTensor.from_local(rows.clone(), ep_mesh, [Shard(0)], run_check=False)
            setattr(experts, name, torch.nn.Parameter(split))
        experts.forward = types.MethodType(_raw_dispatch(ep_mesh.get_group(), local), experts)
        fully_shard(experts, mesh=mesh["dp_shard_mod_ep"], reshard_after_forward=True)
        experts.set_gradient_divide_factor(float(DP))
        experts.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
        fully_shard(block, mesh=shard_mesh, reshard_after_forward=True)
    fully_shard(model, mesh=shard_mesh, reshard_after_forward=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    rank = dist.get_rank()
    mine = [list(range(i * BATCH, (i + 1) * BATCH)) for i in range(rank, steps * DP, DP)]
    batches: Iterator = iter(DataLoader(dataset(steps), batch_sampler=mine))
    parameters = list(model.parameters())

    def step():
        inputs, targets = next(batches)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        by_mesh: dict[object, list[torch.Tensor]] = {}
        for parameter in parameters:
            by_mesh.setdefault(parameter.grad.device_mesh, []).append(parameter)
        squares = [
            torch.nn.utils.get_total_norm([p.grad for p in group], 2.0).full_tensor() ** 2
            for group in by_mesh.values()
        ]
        norm = torch.stack(squares).sum().sqrt()
        for group in by_mesh.values():  # torch's foreach refuses two meshes at once
            torch.nn.utils.clip_grads_with_norm_(group, MAX_NORM, norm)
        optimizer.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        return logged / DP, norm

    return step


def main() -> None:
    impls = sys.argv[1].split(",")
    steps, warmup = int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    runners: dict[str, Step] = {}
    for impl in sorted(impls, key=lambda name: name == "raw"):
        if impl not in ("accel", "raw"):
            raise SystemExit(f"unknown implementation {impl!r}; choose accel or raw")
        runners[impl] = (make_raw if impl == "raw" else make_accel)(warmup + steps)
    result = interleaved(lambda impl, _: runners[impl](), impls, steps, warmup)
    result["parameters"] = sum(p.numel() for p in new_model().parameters())
    report_and_end(result)


if __name__ == "__main__":
    main()
