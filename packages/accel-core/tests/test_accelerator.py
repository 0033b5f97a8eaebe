"""The Accelerator on one process: equivalence with plain PyTorch, defaults, and clear errors."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))

import training_cases as tc

from accel_core import (
    Accelerator,
    DataLoaderConfiguration,
    GradientAccumulationPlugin,
    ProjectConfiguration,
)


@pytest.mark.parametrize(("split", "steps"), tc.CONFIGS)
def test_one_process_reaches_the_plain_pytorch_weights(split, steps):
    expected = tc.reference_weights(tc.reference_batch(split, steps, 1))
    assert tc.max_difference(tc.accelerated_weights(split, steps), expected) < 1e-6


def test_single_device_strategy_and_defaults():
    accelerator = Accelerator()
    assert accelerator.strategy.name == "single_device"
    assert accelerator.distributed_type.value == "NO"
    assert (accelerator.num_processes, accelerator.process_index) == (1, 0)
    assert accelerator.is_main_process and accelerator.is_local_main_process
    assert accelerator.device == torch.device("cpu")
    assert accelerator.mixed_precision == "no"
    assert accelerator.gradient_accumulation_steps == 1
    assert accelerator.sync_gradients
    assert accelerator.state.strategy is accelerator.strategy
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    assert type(model) is torch.nn.Linear


def test_launch_environment_supplies_values_not_given(monkeypatch):
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCEL_GRADIENT_ACCUMULATION_STEPS", "4")
    monkeypatch.setenv("ACCEL_DYNAMO_BACKEND", "eager")
    monkeypatch.setenv("ACCEL_DYNAMO_MODE", "reduce-overhead")
    monkeypatch.setenv("ACCEL_DYNAMO_USE_FULLGRAPH", "1")
    accelerator = Accelerator()
    assert accelerator.mixed_precision == "bf16"
    assert accelerator.gradient_accumulation_steps == 4
    assert accelerator.state.dynamo_plugin.to_kwargs() == {
        "backend": "eager",
        "mode": "reduce-overhead",
        "fullgraph": True,
    }


def test_arguments_win_over_the_launch_environment(monkeypatch):
    monkeypatch.setenv("ACCEL_GRADIENT_ACCUMULATION_STEPS", "4")
    monkeypatch.setenv("ACCEL_STRATEGY", "no-such-strategy")
    accelerator = Accelerator(gradient_accumulation_steps=3, strategy="single_device")
    assert accelerator.gradient_accumulation_steps == 3
    assert accelerator.strategy.name == "single_device"


def test_gradient_accumulation_plugin_is_used():
    plugin = GradientAccumulationPlugin(num_steps=3, sync_with_dataloader=False)
    accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    assert accelerator.gradient_accumulation_steps == 3
    assert accelerator.gradient_state.sync_with_dataloader is False


@pytest.mark.parametrize("steps", [0, -2, 1.5, True])
def test_accumulation_steps_below_one_are_refused(steps):
    with pytest.raises(ValueError, match=r"gradient_accumulation_steps=.* integer >= 1"):
        Accelerator(gradient_accumulation_steps=steps)


def test_steps_and_plugin_together_are_refused():
    with pytest.raises(ValueError, match="set num_steps in the plugin"):
        Accelerator(
            gradient_accumulation_steps=2,
            gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2),
        )


def test_a_data_loader_prepared_twice_is_refused():
    accelerator = Accelerator()
    loader = DataLoader(torch.arange(8), batch_size=2)
    prepared = accelerator.prepare(loader)
    with pytest.raises(ValueError, match="returned by prepare\\(\\) already"):
        accelerator.prepare(prepared)
    with pytest.raises(ValueError, match="passed to prepare\\(\\) already"):
        accelerator.prepare(loader)


def test_prepare_returns_objects_in_the_order_given():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    loader = DataLoader(torch.arange(4), batch_size=2)
    s, d, o, m = accelerator.prepare(scheduler, loader, optimizer, model)
    assert type(s).__name__ == "AcceleratedScheduler" and s.scheduler is scheduler
    assert type(o).__name__ == "AcceleratedOptimizer" and o.optimizer is optimizer
    assert s.optimizers == [o]
    assert m is model
    assert [b.tolist() for b in d] == [[0, 1], [2, 3]]


def test_split_batches_alias_warns_and_configures():
    with pytest.warns(FutureWarning, match="DataLoaderConfiguration"):
        accelerator = Accelerator(split_batches=True)
    assert accelerator.split_batches is True
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
    assert accelerator.even_batches is False and accelerator.split_batches is False


def test_optimizer_and_zero_grad_are_skipped_while_accumulating():
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = torch.nn.Linear(3, 1)
    before = model.weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.ones(4, 3)
    with accelerator.accumulate(model):
        accelerator.backward(model(x).sum())
        first_grad = model.weight.grad.clone()
        optimizer.step()
        optimizer.zero_grad()
    assert not accelerator.sync_gradients
    assert torch.equal(model.weight, before)  # no step
    assert torch.equal(model.weight.grad, first_grad)  # no zero_grad
    # the loss was divided by the 2 steps
    assert torch.allclose(first_grad, torch.full((1, 3), 4 / 2))
    with accelerator.accumulate(model):
        accelerator.backward(model(x).sum())
        optimizer.step()
        optimizer.zero_grad()
    assert accelerator.sync_gradients
    assert torch.allclose(model.weight, before - 0.5 * 4.0)
    assert model.weight.grad is None
    assert not accelerator.optimizer_step_was_skipped


def test_scheduler_follows_accumulation_on_one_process():
    accelerator = Accelerator(gradient_accumulation_steps=3)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    loader = DataLoader(torch.randn(10, 2), batch_size=1)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    for x in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(x).sum())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    # 10 batches, 3 per step, the last one syncs with the end of the loader: 4 optimizer steps
    assert scheduler.scheduler.last_epoch == 4
    assert scheduler.get_last_lr() == [pytest.approx(1 / 5)]


def test_clip_grad_norm_and_value():
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(4, 1))
    accelerator.backward(model(torch.full((1, 4), 10.0)).sum())
    expected = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    norm = accelerator.clip_grad_norm_(model.parameters(), max_norm=1.0)
    assert float(norm) == pytest.approx(float(expected))
    clipped = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert float(clipped) == pytest.approx(1.0, rel=1e-5)
    accelerator.clip_grad_value_(model.parameters(), 0.1)
    assert max(float(p.grad.abs().max()) for p in model.parameters()) == pytest.approx(0.1)


def test_profile_writes_a_chrome_trace(tmp_path):
    from accel_core import ProfileKwargs

    accelerator = Accelerator(kwargs_handlers=[ProfileKwargs(output_trace_dir=str(tmp_path))])
    with accelerator.profile() as profiler:
        torch.ones(8, 8) @ torch.ones(8, 8)
    assert profiler is not None
    trace = (tmp_path / "profile_0.json").read_text()
    assert "traceEvents" in trace and "aten::mm" in trace


def test_project_configuration_is_stored(tmp_path):
    accelerator = Accelerator(project_dir=tmp_path)
    assert accelerator.project_dir == str(tmp_path) == accelerator.logging_dir
    config = ProjectConfiguration(project_dir="a", logging_dir="b", total_limit=2)
    assert Accelerator(project_config=config).logging_dir == "b"


def test_get_state_dict_and_save(tmp_path):
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.save(accelerator.get_state_dict(model), tmp_path / "model.safetensors", True)
    from accel_core import load

    loaded = load(tmp_path / "model.safetensors")
    assert torch.equal(loaded["weight"], model.weight)


def test_free_memory_forgets_prepared_objects():
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    assert accelerator._models == [model]
    assert accelerator.free_memory(model) == [None]
    assert accelerator._models == [] and accelerator.step == 0


def test_find_executable_batch_size_through_the_accelerator():
    from accel_core import find_executable_batch_size

    accelerator = Accelerator()
    tried = []

    @find_executable_batch_size(starting_batch_size=20)
    def train(batch_size):
        accelerator.free_memory()
        tried.append(batch_size)
        if batch_size > 16:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        model = accelerator.prepare(torch.nn.Linear(2, 1))
        loader = accelerator.prepare(DataLoader(torch.randn(32, 2), batch_size=batch_size))
        return [len(b) for b in loader], type(model).__name__

    sizes, name = train()
    assert tried == [20, 18, 16]  # int(size * 0.9), as in Accelerate 1.15
    assert sizes == [16, 16] and name == "Linear"


def test_process_helpers_forward_to_the_process_state():
    accelerator = Accelerator()
    calls = []
    accelerator.on_main_process(lambda: calls.append("main"))()
    accelerator.on_process(lambda: calls.append("p0"), process_index=0)()
    accelerator.on_last_process(lambda: calls.append("last"))()
    with accelerator.main_process_first():
        calls.append("first")
    accelerator.wait_for_everyone()
    with accelerator.split_between_processes([1, 2, 3]) as part:
        assert list(part) == [1, 2, 3]
    assert calls == ["main", "p0", "last", "first"]


def test_no_deprecation_noise_by_default():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Accelerator()


@pytest.mark.slow
def test_dynamo_backend_compiles_prepared_models():
    from accel_core import is_compiled_module

    accelerator = Accelerator(dynamo_backend="eager")
    plain = torch.nn.Linear(3, 2)
    model = accelerator.prepare(plain)
    assert is_compiled_module(model)
    x = torch.randn(4, 3)
    assert torch.equal(model(x), plain(x))
    assert accelerator.unwrap_model(model, keep_torch_compile=False) is plain
