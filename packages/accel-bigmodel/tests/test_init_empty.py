import json
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from accel_bigmodel import init_empty_weights, init_on_device


class WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(1000, 1000)
        self.register_buffer("steps", torch.arange(4.0))


def test_parameters_on_meta_buffers_kept():
    with init_empty_weights():
        model = WithBuffer()
    assert model.linear.weight.device.type == "meta"
    assert isinstance(model.linear.weight, nn.Parameter)
    assert model.linear.weight.requires_grad
    assert model.steps.device.type == "cpu"
    assert torch.equal(model.steps, torch.arange(4.0))


def test_include_buffers_puts_buffers_on_meta():
    with init_empty_weights(include_buffers=True):
        model = WithBuffer()
        made = torch.zeros(3)
    assert model.steps.device.type == "meta"
    assert made.device.type == "meta"
    assert torch.zeros(3).device.type == "cpu"


def test_patches_are_restored_even_after_an_error():
    original = nn.Module.register_parameter
    with pytest.raises(RuntimeError, match="boom"), init_empty_weights(include_buffers=True):
        raise RuntimeError("boom")
    assert nn.Module.register_parameter is original
    assert nn.Linear(2, 2).weight.device.type == "cpu"
    assert nn.Linear(2, 2).weight.abs().sum() > 0  # initialisation runs again outside


def test_init_on_device_cpu_initialises_normally():
    torch.manual_seed(0)
    with init_on_device("cpu"):
        layer = nn.Linear(4, 4)
    torch.manual_seed(0)
    plain = nn.Linear(4, 4)
    assert torch.equal(layer.weight, plain.weight)


def test_initialisation_of_real_tensors_still_runs_inside():
    with init_empty_weights():
        tensor = torch.empty(3)
        nn.init.constant_(tensor, 2.0)
    assert torch.equal(tensor, torch.full((3,), 2.0))


CHILD = textwrap.dedent(
    """
    import json, sys, time, psutil
    import torch
    from torch import nn
    before_dynamo = "torch._dynamo" in sys.modules
    from accel_bigmodel import init_empty_weights
    rss = psutil.Process().memory_info().rss
    start = time.perf_counter()
    with init_empty_weights():
        # 8 x (16384 x 16384) float32 = 8.6 GB if allocated
        model = nn.Sequential(*[nn.Linear(16384, 16384) for _ in range(8)])
    seconds = time.perf_counter() - start
    growth = psutil.Process().memory_info().rss - rss
    print(json.dumps({"seconds": seconds, "growth": growth, "before": before_dynamo,
                      "dynamo": "torch._dynamo" in sys.modules,
                      "params": sum(p.numel() for p in model.parameters())}))
    """
)


@pytest.mark.slow
def test_skeleton_is_fast_and_does_not_import_dynamo():
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["params"] == 8 * (16384 * 16384 + 16384)
    assert result["growth"] < 50 * 2**20
    assert result["seconds"] < 2.0
    if not result["before"]:
        assert not result["dynamo"], "building a skeleton imported torch._dynamo"


LLAMA_70B = textwrap.dedent(
    """
    import json, time, psutil
    from transformers import LlamaConfig, LlamaForCausalLM
    from accel_bigmodel import init_empty_weights
    config = LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                         num_attention_heads=64, num_key_value_heads=8, vocab_size=32000)
    rss = psutil.Process().memory_info().rss
    start = time.perf_counter()
    with init_empty_weights():
        model = LlamaForCausalLM(config)
    seconds = time.perf_counter() - start
    growth = psutil.Process().memory_info().rss - rss
    devices = sorted({p.device.type for p in model.parameters()})
    print(json.dumps({"seconds": seconds, "growth": growth, "devices": devices,
                      "params": sum(p.numel() for p in model.parameters())}))
    """
)


@pytest.mark.slow
def test_70b_llama_skeleton_allocates_nothing():
    done = subprocess.run(
        [sys.executable, "-c", LLAMA_70B], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["params"] > 68e9
    assert result["devices"] == ["meta"]
    assert result["growth"] < 100 * 2**20  # 276 GB of float32 weights if allocated
    assert result["seconds"] < 5.0


@pytest.mark.parametrize(
    ("environment", "on_meta"),
    [
        ({}, False),
        ({"ACCELERATE_INIT_INCLUDE_BUFFERS": "1"}, True),  # Accelerate's variable is read
        ({"ACCELERATE_INIT_INCLUDE_BUFFERS": "false"}, False),
        ({"ACCEL_INIT_INCLUDE_BUFFERS": "yes"}, True),
        # ours wins over Accelerate's when both are set, either way
        ({"ACCEL_INIT_INCLUDE_BUFFERS": "0", "ACCELERATE_INIT_INCLUDE_BUFFERS": "1"}, False),
        ({"ACCEL_INIT_INCLUDE_BUFFERS": "true", "ACCELERATE_INIT_INCLUDE_BUFFERS": "0"}, True),
    ],
)
def test_include_buffers_default_comes_from_the_environment(monkeypatch, environment, on_meta):
    monkeypatch.delenv("ACCEL_INIT_INCLUDE_BUFFERS", raising=False)
    monkeypatch.delenv("ACCELERATE_INIT_INCLUDE_BUFFERS", raising=False)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    with init_empty_weights():
        model = WithBuffer()
    assert model.steps.device.type == ("meta" if on_meta else "cpu")
    with init_on_device("meta"):
        other = WithBuffer()
    assert other.steps.device.type == ("meta" if on_meta else "cpu")
    # an explicit argument beats the environment
    with init_empty_weights(include_buffers=not on_meta):
        explicit = WithBuffer()
    assert explicit.steps.device.type == ("cpu" if on_meta else "meta")


def test_include_buffers_environment_value_must_be_a_boolean(monkeypatch):
    monkeypatch.setenv("ACCEL_INIT_INCLUDE_BUFFERS", "sometimes")
    invalid = pytest.raises(ValueError, match="ACCEL_INIT_INCLUDE_BUFFERS='sometimes'")
    with invalid, init_empty_weights():
        pass


def test_include_buffers_enters_the_meta_device_and_patches_nothing():
    import threading

    register_parameter = nn.Module.register_parameter
    register_buffer = nn.Module.register_buffer
    elsewhere: list[torch.device] = []
    with init_empty_weights(include_buffers=True):
        assert nn.Module.register_parameter is register_parameter
        assert nn.Module.register_buffer is register_buffer
        model = nn.BatchNorm1d(4)
        thread = threading.Thread(target=lambda: elsewhere.append(nn.Linear(2, 2).weight.device))
        thread.start()
        thread.join()
    assert model.weight.is_meta and model.running_mean.is_meta
    assert elsewhere == [torch.device("cpu")]  # another thread builds as usual
