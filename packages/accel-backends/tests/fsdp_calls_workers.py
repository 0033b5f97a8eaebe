"""Workers of the tests of Accelerate's FSDP functions (save_fsdp_model and friends,
fsdp2_prepare_model, fsdp2_load_full_state_dict), run on 2 real gloo processes. Each writes what
the test checks into the folder given in argv."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from fsdp_reshard_workers import _accelerator, _equal, _full_states
from fsdp_workers import _full_weights, _reset, _units, new_model, train

from accel_backends import (
    FullyShardedDataParallelPlugin,
    fsdp2_load_full_state_dict,
    fsdp2_prepare_model,
    load_fsdp_model,
    load_fsdp_optimizer,
    save_fsdp_model,
    save_fsdp_optimizer,
)

#: (state_dict_type, use_dcp, model and optimizer index) of each round trip
VARIANTS = [
    ("SHARDED_STATE_DICT", True, 0),
    ("SHARDED_STATE_DICT", False, 1),
    ("FULL_STATE_DICT", True, 0),
    ("FULL_STATE_DICT", True, 1),
]


def _plugin(
    state_dict_type: str, fsdp_version: int = 2, **options: object
) -> FullyShardedDataParallelPlugin:
    return FullyShardedDataParallelPlugin(
        fsdp_version=fsdp_version,
        state_dict_type=state_dict_type,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["Block"],
        **options,
    )


def _folder(out: Path, variant: tuple[str, bool, int]) -> Path:
    kind, use_dcp, index = variant
    return out / f"{kind}_{'dcp' if use_dcp else 'ranks'}_{index}"


def round_trips() -> None:
    """Train 3 steps, save model and optimizer in every variant, train 3 more; then, for each
    variant, a fresh model and optimizer load it and train the same 3 steps (argv[2]: the FSDP
    version)."""
    out, version = Path(sys.argv[1]), int(sys.argv[2])
    accelerator = _accelerator("SHARDED_STATE_DICT", version)
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    train(accelerator, model, optimizer, range(3))
    at_save = _full_states(accelerator, model, optimizer)
    for variant in VARIANTS:
        kind, use_dcp, index = variant
        plugin, folder = _plugin(kind, version), _folder(out, variant)
        save_fsdp_model(plugin, accelerator, model, folder, model_index=index, use_dcp=use_dcp)
        save_fsdp_optimizer(
            plugin, accelerator, optimizer, model, folder, optimizer_index=index, use_dcp=use_dcp
        )
    train(accelerator, model, optimizer, range(3, 6))
    expected = _full_weights(accelerator, model)
    if accelerator.is_main_process:
        torch.save(at_save["model"], out / "at_save.pt")
    _reset()

    results = {}
    for variant in VARIANTS:
        kind, use_dcp, index = variant
        plugin, folder = _plugin(kind, version), _folder(out, variant)
        accelerator = _accelerator("SHARDED_STATE_DICT", version)
        model = new_model(seed=1)  # other weights: everything must come from the files
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
        model, optimizer = accelerator.prepare(model, optimizer)
        # Accelerate's rule: the sharded model folder itself may be given
        source = folder / f"pytorch_model_fsdp_{index}" if kind == "SHARDED_STATE_DICT" else folder
        keys = load_fsdp_model(
            plugin, accelerator, model, source if use_dcp else folder, index, use_dcp=use_dcp
        )
        load_fsdp_optimizer(plugin, accelerator, optimizer, model, folder, index, use_dcp=use_dcp)
        loaded = _full_states(accelerator, model, optimizer)
        train(accelerator, model, optimizer, range(3, 6))
        results[folder.name] = {
            "keys": [list(keys.missing_keys), list(keys.unexpected_keys)],
            "loaded_model": _equal(loaded["model"], at_save["model"]),
            "loaded_optimizer": _equal(loaded["optimizer"], at_save["optimizer"]),
            "continued": _equal(_full_weights(accelerator, model), expected),
        }
        accelerator.wait_for_everyone()
        _reset()
    rank = torch.distributed.get_rank()
    (out / f"results_{rank}.json").write_text(json.dumps(results))
    torch.distributed.barrier()


class BufferedNet(torch.nn.Module):
    """The test network with a persistent buffer (``shift``) and a non-persistent one
    (``scale``, in no state dict)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.net = new_model(seed)
        self.register_buffer("shift", torch.full((2,), 0.5, dtype=torch.float64))
        self.register_buffer("scale", torch.full((2,), 2.0, dtype=torch.float64), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) * self.scale + self.shift


def _buffered(rank: int) -> BufferedNet:
    """Rank 0 holds the real weights; the others hold zeros in what a state dict would bring
    (parameters, ``shift``), not in ``scale``, which construction computes on every rank."""
    model = BufferedNet(seed=0)
    if rank != 0:
        with torch.no_grad():
            for tensor in [*model.parameters(), model.shift]:
                tensor.zero_()
    return model


def prepare_and_load_full() -> None:
    """fsdp2_prepare_model, fsdp2_load_full_state_dict, and cpu_ram_efficient_loading."""
    from accel_core import Accelerator

    out = Path(sys.argv[1])
    accelerator = _accelerator("SHARDED_STATE_DICT")
    rank = accelerator.process_index
    model = new_model()
    prepared = fsdp2_prepare_model(accelerator, model)
    found: dict[str, object] = {
        "same_object": prepared is model and fsdp2_prepare_model(accelerator, model) is model,
        "units": _units(model),
        "rows": int(model.inp.weight.to_local().shape[0]),
    }
    other = new_model(seed=5)
    full_sd = {k: v.clone() for k, v in other.state_dict().items()} if rank == 0 else {}
    fsdp2_load_full_state_dict(accelerator, model, full_sd)
    gathered = _full_weights(accelerator, model)
    found["loaded_from_rank0"] = _equal(gathered, other.state_dict())
    _reset()

    # cpu_ram_efficient_loading: rank 1 starts from zeros, yet trains as if it had the weights
    runs = {}
    for efficient in (False, True):
        plugin = _plugin("SHARDED_STATE_DICT", cpu_ram_efficient_loading=efficient)
        accelerator = Accelerator(fsdp_plugin=plugin)
        model = _buffered(rank) if efficient else BufferedNet(seed=0)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
        model, optimizer = accelerator.prepare(model, optimizer)
        inner = accelerator.unwrap_model(model)
        buffers = {"shift": inner.shift.tolist(), "scale": inner.scale.tolist()}
        start = _full_weights(accelerator, model)
        losses = train(accelerator, model, optimizer, range(4))
        runs[efficient] = (start, losses, _full_weights(accelerator, model), buffers)
        accelerator.wait_for_everyone()
        _reset()
    found["efficient_start"] = _equal(runs[True][0], runs[False][0])
    found["efficient_losses"] = runs[True][1] == runs[False][1]
    found["efficient_weights"] = _equal(runs[True][2], runs[False][2])
    found["efficient_buffers"] = runs[True][3]

    # under mixed precision, fp32 master weights (Accelerate's upcast) for a bf16 model
    plugin = _plugin("SHARDED_STATE_DICT", mixed_precision_policy="bf16")
    fake = SimpleNamespace(
        state=SimpleNamespace(fsdp_plugin=plugin),
        strategy=None,
        device=torch.device("cpu"),
        num_processes=2,
        mixed_precision="bf16",
    )
    model = fsdp2_prepare_model(fake, new_model().to(torch.bfloat16))  # type: ignore[arg-type]
    found["upcast"] = sorted({str(p.dtype) for p in model.parameters()})
    found["computes_in"] = str(model(torch.randn(2, 4)).dtype)
    (out / f"prepare_{rank}.json").write_text(json.dumps(found))
    torch.distributed.barrier()


def full_state_dict_lacking_a_key() -> None:
    """Process 0's full state dict lacks a key: every process raises the same KeyError."""
    out = Path(sys.argv[1])
    accelerator = _accelerator("SHARDED_STATE_DICT")
    rank = accelerator.process_index
    model = fsdp2_prepare_model(accelerator, new_model())
    full_sd = {k: v for k, v in new_model().state_dict().items() if k != "out.bias"}
    try:
        fsdp2_load_full_state_dict(accelerator, model, full_sd if rank == 0 else {})
    except KeyError as error:
        (out / f"missing_{rank}.txt").write_text(str(error))
    torch.distributed.barrier()
