"""move_to_device and patch_optimizer_step (Accelerate's accelerate.optimizer helpers)."""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import torch

from accel_core.optimizer_helpers import move_to_device, patch_optimizer_step

Pair = namedtuple("Pair", ["first", "second"])


def test_move_to_device_rebuilds_containers_of_their_own_type():
    tensor = torch.ones(2, dtype=torch.float64)
    state = OrderedDict(
        step=3,
        pair=Pair(tensor, "name"),
        values=[tensor, (tensor, None)],
    )
    moved = move_to_device(state, torch.device("meta"))
    assert type(moved) is OrderedDict and moved["step"] == 3
    assert type(moved["pair"]) is Pair and moved["pair"].second == "name"
    assert moved["pair"].first.device.type == "meta" and moved["pair"].first.dtype == torch.float64
    assert type(moved["values"][1]) is tuple and moved["values"][1][1] is None
    assert moved["values"][0].device.type == "meta"
    assert tensor.device.type == "cpu"  # the original is untouched


def test_move_to_device_of_an_optimizer_state_dict():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    moved = move_to_device(optimizer.state_dict(), "meta")
    assert moved["state"][0]["exp_avg"].device.type == "meta"
    assert moved["param_groups"] == optimizer.state_dict()["param_groups"]


def test_patch_optimizer_step_records_the_call_and_returns_the_result():
    class Holder:
        _accelerate_step_called = False

    holder = Holder()
    seen = []
    patched = patch_optimizer_step(holder, lambda *args, **kwargs: seen.append((args, kwargs)) or 5)
    assert not holder._accelerate_step_called
    assert patched(1, closure=None) == 5
    assert holder._accelerate_step_called and seen == [((1,), {"closure": None})]


def test_unwrap_optimizer_returns_the_torch_optimizer_inside_the_wrappers():
    import torch

    from accel_core.optimizer import AcceleratedOptimizer, unwrap_optimizer

    inner = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    wrapped = AcceleratedOptimizer(AcceleratedOptimizer(inner, device_placement=False))
    assert unwrap_optimizer(wrapped) is inner
    assert unwrap_optimizer(inner) is inner
