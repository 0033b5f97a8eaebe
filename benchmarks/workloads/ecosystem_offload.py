"""``from_pretrained(device_map="auto")`` with disk offload, then greedy ``generate``; the same file
runs under Hugging Face Accelerate and under accel's ``accelerate`` alias (it imports neither).

Usage: python ecosystem_offload.py <model> <offload_root> <cpu_budget_bytes> <new_tokens>
Loads the model once to warm up (files and imports), then 3 times, timed, each into a fresh offload
folder under ``offload_root``, with ``max_memory={"cpu": budget}``: the layers that do not fit go to
"disk". Then, on 1 thread, a 2-token warm-up ``generate`` and the timed greedy one of
``new_tokens`` tokens (``do_sample=False``, ``min_new_tokens`` = ``max_new_tokens``). Prints one
JSON line: the median load seconds, the generated tokens per second, the generated token ids, the
number of decoder layers the device map sends to "disk" and the module of the hook on the last
layer.
"""

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

PROMPT = [[1, 17, 230, 45, 988, 7, 301, 64]]
LOADS = 3


def load(model_dir: str, offload: Path, budget: int):
    return AutoModelForCausalLM.from_pretrained(
        model_dir,
        device_map="auto",
        max_memory={"cpu": budget},
        offload_folder=str(offload),
        dtype=torch.float32,
    )


def generate(model, new_tokens: int, **kwargs) -> torch.Tensor:
    """Greedy ``generate`` of exactly ``new_tokens`` tokens after ``PROMPT`` (``kwargs`` are passed
    on, e.g. a streamer)."""
    ids = torch.tensor(PROMPT)
    return model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=0,
        **kwargs,
    )


def disk_layers(model) -> int:
    """Decoder layers placed on "disk" (a map entry covers the layers its name is a prefix of)."""
    device_map = model.hf_device_map
    count = 0
    for index in range(model.config.num_hidden_layers):
        name = f"model.layers.{index}"
        owners = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
        count += device_map[max(owners, key=len)] == "disk"
    return count


def timed_loads(model_dir: str, root: Path, budget: int) -> tuple[torch.nn.Module, list[float]]:
    """A warm-up load, then :data:`LOADS` timed ones, each into a fresh offload folder under
    ``root`` (``timed-<i>``); the last model (in eval mode) and the seconds of each load."""
    load(model_dir, root / "warm-up", budget)
    times = []
    model = None
    for index in range(LOADS):
        model = None  # the previous load is freed before the next starts
        start = time.perf_counter()
        model = load(model_dir, root / f"timed-{index}", budget)
        times.append(time.perf_counter() - start)
    assert model is not None
    return model.eval(), times


def main() -> None:
    model_dir, root = sys.argv[1], Path(sys.argv[2])
    budget, new_tokens = int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    model, times = timed_loads(model_dir, root, budget)
    with torch.no_grad():
        generate(model, 2)
        start = time.perf_counter()
        out = generate(model, new_tokens)
        generate_s = time.perf_counter() - start
    tokens = out[0, len(PROMPT[0]) :].tolist()
    hook = getattr(model.model.layers[-1], "_hf_hook", None)
    print(
        json.dumps(
            {
                "load_s": statistics.median(times),
                "tokens_per_s": len(tokens) / generate_s,
                "tokens": tokens,
                "disk_layers": disk_layers(model),
                "hook": f"{type(hook).__module__}.{type(hook).__qualname__}",
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
