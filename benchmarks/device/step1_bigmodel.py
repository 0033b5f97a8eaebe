"""Step 1: accel-bigmodel on cuda:0 + cpu + disk, outputs equal to the plain CPU model.

A ~50 MB float32 model of Linear layers is saved with safetensors, rebuilt under
``init_empty_weights``, mapped by ``infer_auto_device_map`` with a ``max_memory`` that forces
GPU, CPU and disk, and loaded with ``load_checkpoint_and_dispatch``. Without CUDA (dry run here)
the map is over cpu + disk only.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
from _report import device, run
from safetensors.torch import save_file

WIDTH, LAYERS = 1024, 12  # 12 x (1024*1024 + 1024) float32 = ~50 MB


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer() for _ in range(LAYERS)])
        self.head = torch.nn.Linear(WIDTH, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def body():
    from accel import init_empty_weights
    from accel.big_modeling import load_checkpoint_and_dispatch
    from accel.utils import infer_auto_device_map

    torch.manual_seed(0)
    reference = Net().eval()
    size = sum(p.numel() * p.element_size() for p in reference.parameters())
    inputs = torch.randn(8, WIDTH)
    with torch.no_grad():
        expected = reference(inputs)

    gpu = device().type == "cuda"
    layer = (WIDTH * WIDTH + WIDTH) * 4
    # about a third of the layers on each: GPU, CPU, the rest on disk
    max_memory = {"cpu": 4 * layer + layer // 2}
    if gpu:
        max_memory = {0: 4 * layer + layer // 2, "cpu": 4 * layer + layer // 2}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        save_file(
            {k: v.contiguous() for k, v in reference.state_dict().items()},
            tmp / "model.safetensors",
        )
        with init_empty_weights():
            empty = Net()
        device_map = infer_auto_device_map(
            empty, max_memory=max_memory, no_split_module_classes=["Layer"]
        )
        placed = sorted({str(v) for v in device_map.values()})
        with init_empty_weights():
            empty = Net()
        start = time.perf_counter()
        model = load_checkpoint_and_dispatch(
            empty,
            str(tmp / "model.safetensors"),
            device_map=device_map,
            offload_folder=str(tmp / "offload"),
        )
        load_s = time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            start = time.perf_counter()
            got = model(inputs.to(device()))
            if gpu:
                torch.cuda.synchronize()
            forward_s = time.perf_counter() - start
        diff = (got.float().cpu() - expected).abs().max().item()
        param_devices = sorted({str(p.device) for p in model.parameters()})
    wanted = {"0", "cpu", "disk"} if gpu else {"cpu", "disk"}
    numbers = {
        "device": str(device()),
        "model_MB": round(size / 2**20, 1),
        "max_memory": max_memory,
        "map_targets": placed,
        "map": {k: str(v) for k, v in device_map.items()},
        "param_devices": param_devices,
        "max_abs_diff": diff,
        "tolerance": 1e-5,
        "load_s": round(load_s, 3),
        "forward_s": round(forward_s, 3),
    }
    return diff <= 1e-5 and set(placed) == wanted, numbers


if __name__ == "__main__":
    run("1 bigmodel cuda+cpu+disk", body)
