"""Filling an FSDP2-sharded model from a full state dict that only process 0 holds.

``cpu_ram_efficient_loading`` (Accelerate's name): process 0 loads the pretrained weights, the
others build the model without them; the model is moved to the meta device, sharded there, and
each parameter is then scattered from process 0 (``distribute_tensor``, which sends every process
only its shard), so no process ever holds a second full copy. Buffers, which FSDP2 does not
shard, are broadcast whole. Non-persistent buffers are not in a state dict: they are kept aside
before the move to meta and put back after.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

StateDict = Mapping[str, torch.Tensor]


def load_full_state_dict(
    model: torch.nn.Module,
    full_state_dict: StateDict,
    *,
    device: torch.device,
    cpu_offload: bool = False,
) -> torch.nn.Module:
    """Replace every entry of the sharded ``model``'s state dict by its value in
    ``full_state_dict``, read on process 0 only (the others may pass ``{}``), in place.

    Values are cast to the model's dtypes; with ``cpu_offload`` the shards end on the CPU (what
    FSDP2's CPU offload expects). A collective: every process calls it. Raises ``KeyError`` on
    every process for an entry of the model that process 0's ``full_state_dict`` lacks (process 0
    checks and tells the others before any tensor moves, so none waits for a scatter).
    """
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, distribute_tensor

    is_main = dist.get_rank() == 0
    current = model.state_dict()
    verdict: list[str | None] = [None]
    if is_main:
        missing = sorted(set(current) - set(full_state_dict))
        if missing:
            verdict[0] = (
                f"the full state dict on process 0 lacks {missing} of the sharded model "
                f"({len(full_state_dict)} entries given, the model has {len(current)})"
            )
    if dist.get_world_size() > 1:
        dist.broadcast_object_list(verdict, src=0)
    if verdict[0] is not None:
        raise KeyError(verdict[0])
    loaded: dict[str, torch.Tensor] = {}
    for name, value in current.items():
        if is_main:
            full = full_state_dict[name].detach()
            if isinstance(full, DTensor):
                full = full.full_tensor()
            full = full.to(device=device, dtype=value.dtype).contiguous()
        else:
            full = torch.empty(value.shape, dtype=value.dtype, device=device)
        if isinstance(value, DTensor):
            new = distribute_tensor(full, value.device_mesh, value.placements, src_data_rank=0)
        else:
            dist.broadcast(full, src=0)
            new = full
        loaded[name] = new.to("cpu") if cpu_offload else new
    model.load_state_dict(loaded, assign=True)
    return model


def non_persistent_buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies of ``model``'s buffers registered with ``persistent=False``, by qualified name."""
    found: dict[str, torch.Tensor] = {}
    for prefix, module in model.named_modules():
        for name in module._non_persistent_buffers_set:
            buffer = module._buffers.get(name)
            if buffer is not None:
                found[f"{prefix}.{name}" if prefix else name] = buffer.detach().clone()
    return found


def put_back_buffers(
    model: torch.nn.Module, buffers: dict[str, torch.Tensor], device: torch.device
) -> None:
    """Register ``buffers`` (from :func:`non_persistent_buffers`) again, on ``device``."""
    for qualified, buffer in buffers.items():
        owner, _, name = qualified.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        module.register_buffer(name, buffer.to(device), persistent=False)
