"""The ``xla`` strategy trains on XLA's CPU device as plain PyTorch trains on CPU.

Needs torch_xla (the ``backend-xla`` session, ``PJRT_DEVICE=CPU``); skipped elsewhere.
"""

from __future__ import annotations

import pytest

torch_xla = pytest.importorskip("torch_xla")
torch_xla.device()  # the XLA runtime must start before any backward pass of the process

import torch  # noqa: E402
from xla_support import (  # noqa: E402
    ATOL,
    accelerated_training,
    assert_weights_close,
    loss_of,
    make_dataset,
    make_model,
    plain_training,
    xla_accelerator,
)

from accel_ops import DistributedType  # noqa: E402


def test_the_accelerator_runs_on_the_xla_device():
    with xla_accelerator() as accelerator:
        assert accelerator.device.type == "xla"
        assert accelerator.distributed_type is DistributedType.XLA
        assert accelerator.state.distributed_type is DistributedType.XLA
        assert accelerator.num_processes == 1
        model = accelerator.prepare(make_model())
        assert {p.device.type for p in model.parameters()} == {"xla"}


def test_the_launch_environment_chooses_the_strategy(monkeypatch):
    """What ``accel launch --use_xla`` writes: ``ACCEL_STRATEGY=xla`` and the ``xla`` section's
    keys in ``ACCEL_STRATEGY_CONFIG``. (The name is registered here as the accel-backends entry
    point registers it once installed.)"""
    from accel_backends.xla.strategy import XLAStrategy
    from accel_core import Accelerator
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState
    from accel_core.strategies import registry

    monkeypatch.setenv("ACCEL_STRATEGY", "xla")
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG", '{"downcast_bf16": false}')
    monkeypatch.setitem(registry._registered, "xla", XLAStrategy)
    try:
        accelerator = Accelerator()
        assert isinstance(accelerator.strategy, XLAStrategy)
        assert accelerator.device.type == "xla" and not accelerator.strategy.spmd
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()


def test_training_equals_plain_pytorch_on_cpu():
    """Three epochs of 8 AdamW steps, within ``ATOL`` (see xla_support for its reasons)."""
    dataset = make_dataset()
    expected, expected_losses = plain_training(make_model(), dataset, batch_size=4, epochs=3)
    with xla_accelerator() as accelerator:
        weights, losses = accelerated_training(
            accelerator, make_model(), dataset, batch_size=4, epochs=3
        )
    assert {t.device.type for t in weights.values()} == {"cpu"}
    assert_weights_close(weights, expected)
    torch.testing.assert_close(losses, expected_losses, rtol=0.0, atol=ATOL)
    assert losses[-1] < losses[0]


def test_accumulation_steps_every_other_batch_and_on_the_last_one():
    """Seven batches, two per step: steps after batches 2, 4, 6 and (end of data) 7, with each
    step's gradient the mean over its batches, as in plain PyTorch."""
    dataset = make_dataset(samples=28)
    expected, _ = plain_training(make_model(), dataset, batch_size=4, accumulation=2)
    syncs = []
    with xla_accelerator(gradient_accumulation_steps=2) as accelerator:
        weights, _ = accelerated_training(
            accelerator,
            make_model(),
            dataset,
            batch_size=4,
            on_batch=lambda _: syncs.append(accelerator.sync_gradients),
        )
        steps = [
            float(s["step"]) for s in accelerator._optimizers[0].state_dict()["state"].values()
        ]
    assert syncs == [False, True, False, True, False, True, True]
    assert set(steps) == {4.0}
    assert_weights_close(weights, expected)


def test_accumulated_gradients_wait_for_the_step():
    with xla_accelerator(gradient_accumulation_steps=2) as accelerator:
        model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(make_dataset(), batch_size=4)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        before = {k: v.clone() for k, v in accelerator.get_state_dict(model).items()}
        batch = next(iter(loader))
        with accelerator.accumulate(model):
            accelerator.backward(loss_of(model, batch))
            optimizer.step()
            optimizer.zero_grad()
        assert not accelerator.sync_gradients
        assert all(p.grad is not None for p in model.parameters())  # kept for the next batch
        after = accelerator.get_state_dict(model)
        assert all(torch.equal(before[k], after[k]) for k in before)


def test_clipping_matches_plain_pytorch():
    dataset = make_dataset()
    expected, _ = plain_training(make_model(), dataset, batch_size=8, clip=0.05)
    with xla_accelerator() as accelerator:
        weights, _ = accelerated_training(
            accelerator, make_model(), dataset, batch_size=8, clip=0.05
        )
    assert_weights_close(weights, expected)
    with xla_accelerator() as accelerator:
        model = make_model()
        reference = make_model()
        batch = next(iter(torch.utils.data.DataLoader(dataset, batch_size=8)))
        loss_of(reference, batch).backward()
        expected_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
        model, loader = accelerator.prepare(
            model, torch.utils.data.DataLoader(dataset, batch_size=8)
        )
        accelerator.backward(loss_of(model, next(iter(loader))))
        norm = accelerator.clip_grad_norm_(model.parameters(), 0.05)
        assert norm.device.type == "xla"
        torch.testing.assert_close(norm.cpu(), expected_norm, rtol=0.0, atol=ATOL)
        again = accelerator.clip_grad_norm_(model.parameters(), 1e9)
        assert float(again) == pytest.approx(0.05, rel=1e-5)


def test_bf16_autocasts_on_the_xla_device():
    """``mixed_precision="bf16"``: the layers compute in bfloat16 on XLA, the model returns
    float32, the weights stay float32, and training still lowers the loss."""
    seen = []
    with xla_accelerator(mixed_precision="bf16") as accelerator:
        model = make_model()
        model[0].register_forward_hook(lambda _m, _i, output: seen.append(output.dtype))
        weights, losses = accelerated_training(
            accelerator, model, make_dataset(), batch_size=4, epochs=3
        )
        assert accelerator.mixed_precision == "bf16" and accelerator.native_amp
        out = model(torch.randn(2, 4, device=accelerator.device))
    assert set(seen) == {torch.bfloat16}
    assert out.dtype == torch.float32
    assert {t.dtype for t in weights.values()} == {torch.float32}
    assert losses[-1] < losses[0]


_BACKWARD_FIRST = """
import torch
torch.nn.Linear(2, 1)(torch.randn(3, 2)).sum().backward()  # plain CPU, before torch_xla starts
from accel_backends.xla.strategy import XLAStrategy
from accel_core import Accelerator
accelerator = Accelerator(strategy=XLAStrategy())
model = accelerator.prepare(torch.nn.Linear(2, 1))
try:
    accelerator.backward(model(torch.randn(3, 2, device=accelerator.device)).sum())
except RuntimeError as error:
    print("ERROR", error)
"""


def test_a_backward_before_the_runtime_started_is_explained():
    """torch's autograd engine sizes its device queues at the first backward of the process: an
    XLA backward after a CPU one that ran before torch_xla's runtime started fails inside torch
    with an internal assert. The strategy names the cause and the fix."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", _BACKWARD_FIRST], capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ERROR strategy 'xla': torch's autograd engine has no queue" in result.stdout
    assert "before any backward pass of the process" in result.stdout
