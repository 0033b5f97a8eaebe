"""Mixed precision: bf16 autocast on CPU, fp16 on CPU in fp32 as Accelerate, the forward wrapper,
the scaler."""

from __future__ import annotations

import pytest
import torch

from accel_core import (
    Accelerator,
    AcceleratorState,
    AutocastKwargs,
    GradScalerKwargs,
    get_grad_scaler,
    get_mixed_precision_context_manager,
)
from accel_core.precision import Precision, check_mixed_precision


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def test_bf16_autocast_runs_on_cpu():
    accelerator = Accelerator(mixed_precision="bf16")
    assert accelerator.mixed_precision == "bf16" and accelerator.native_amp
    assert accelerator.scaler is None
    layer = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    with accelerator.autocast():
        inside = layer(x)
    assert inside.dtype == torch.bfloat16
    assert layer(x).dtype == torch.float32
    with accelerator.autocast(AutocastKwargs(enabled=False)):
        assert layer(x).dtype == torch.float32


def test_prepared_model_computes_in_bf16_and_returns_fp32():
    accelerator = Accelerator(mixed_precision="bf16")
    plain = _model()
    x = torch.randn(5, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = plain(x).float()
    model = accelerator.prepare(_model())
    out = model(x)
    assert out.dtype == torch.float32
    assert torch.equal(out, expected)
    # the result is really bf16-rounded: it differs from the fp32 computation
    assert not torch.equal(out, plain(x))
    # backward through the wrapper reaches fp32 parameters
    accelerator.backward(out.sum())
    assert model[0].weight.grad.dtype == torch.float32
    bare = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert "forward" not in bare.__dict__
    assert torch.equal(bare(x), plain(x))


def test_get_state_dict_and_save_state_keep_the_model_in_bf16(tmp_path):
    accelerator = Accelerator(mixed_precision="bf16")
    plain = _model()
    x = torch.randn(5, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = plain(x).float()
    model = accelerator.prepare(_model())
    accelerator.get_state_dict(model)
    accelerator.save_state(tmp_path / "ckpt")
    accelerator.save_model(model, tmp_path / "model")
    assert torch.equal(model(x), expected)  # still under autocast, as in Accelerate


def test_fp16_on_cpu_trains_in_fp32_with_one_warning_as_accelerate():
    # a GPU config smoke-tested on a laptop runs there, as under Accelerate
    with pytest.warns(UserWarning, match=r"fp16' on CPU.*full precision \(fp32\).*'bf16'") as seen:
        accelerator = Accelerator(mixed_precision="fp16")
    assert len([w for w in seen if "fp16' on CPU" in str(w.message)]) == 1
    assert accelerator.mixed_precision == accelerator.state.mixed_precision == "fp16"
    assert not accelerator.native_amp and accelerator.scaler is None
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    reference = torch.nn.Linear(4, 2)
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    inputs = torch.randn(3, 4)
    with accelerator.autocast():
        loss = model(inputs).pow(2).sum()
    assert loss.dtype == torch.float32
    accelerator.backward(loss)
    optimizer.step()
    reference_loss = reference(inputs).pow(2).sum()
    reference_loss.backward()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    assert torch.equal(loss, reference_loss)
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(ours, theirs)


def test_unknown_precision_lists_the_choices():
    with pytest.raises(ValueError, match="'no', 'fp16', 'bf16'"):
        check_mixed_precision("fp8", torch.device("cpu"))


def test_state_refuses_to_switch_precision_in_one_process():
    Accelerator(mixed_precision="bf16")
    with pytest.raises(ValueError, match="cannot switch to 'no'"):
        Accelerator(mixed_precision="no")
    AcceleratorState._reset_state()
    assert Accelerator(mixed_precision="no").mixed_precision == "no"


def test_context_manager_helper_follows_the_state():
    Accelerator(mixed_precision="bf16")
    with get_mixed_precision_context_manager(native_amp=True):
        assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.bfloat16
    with get_mixed_precision_context_manager(native_amp=False):
        assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.float32


def test_grad_scaler_kwargs_reach_the_scaler():
    # fp16 needs CUDA to train, but the scaler object itself can be built and inspected on CPU.
    scaler = get_grad_scaler(None, "cpu", **GradScalerKwargs(init_scale=1024.0).to_kwargs())
    assert scaler.get_scale() == 1024.0


def test_scaled_optimizer_skips_the_step_on_overflow():
    from accel_core import AcceleratedOptimizer

    Accelerator()
    model = torch.nn.Linear(2, 1)
    before = model.weight.detach().clone()
    optimizer = AcceleratedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        scaler=torch.amp.GradScaler("cpu", init_scale=8.0),
    )
    optimizer.scaler.scale(torch.tensor(1.0))  # the scaler starts on its first scale()
    model.weight.grad = torch.tensor([[float("inf"), 1.0]])
    model.bias.grad = torch.tensor([1.0])
    optimizer.step()
    assert optimizer.step_was_skipped
    assert torch.equal(model.weight, before)
    assert optimizer.scaler.get_scale() == 4.0
    model.weight.grad = torch.tensor([[8.0, 8.0]])  # scaled by 4 -> 2.0 each
    model.bias.grad = torch.tensor([4.0])
    optimizer.step()
    assert not optimizer.step_was_skipped
    assert torch.allclose(model.weight, before - 0.1 * 2.0)
    assert "step" not in optimizer.optimizer.__dict__  # the tracking wrapper was removed


def test_precision_object_scales_only_for_fp16():
    precision = Precision("bf16", torch.device("cpu"))
    loss = torch.tensor(2.0)
    assert precision.scale_loss(loss) is loss
