import torch
from torch import nn

from accel_bigmodel import (
    AlignDevicesHook,
    ModelHook,
    SequentialHook,
    add_hook_to_module,
    align_module_device,
    attach_align_device_hook,
    attach_execution_device_hook,
    cpu_offload,
    cpu_offload_with_hook,
    disk_offload,
    has_offloaded_params,
    remove_hook_from_module,
    remove_hook_from_submodules,
)


class AddOne(ModelHook):
    def __init__(self):
        self.events = []

    def init_hook(self, module):
        self.events.append("init")
        return module

    def pre_forward(self, module, x):
        return (x + 1,), {}

    def post_forward(self, module, output):
        return output * 2

    def detach_hook(self, module):
        self.events.append("detach")
        return module


def _linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(3, 3)


def test_hook_changes_inputs_and_outputs_and_is_removable():
    layer = _linear()
    x = torch.randn(2, 3)
    plain = layer(x)
    hook = AddOne()
    add_hook_to_module(layer, hook)
    assert layer._hf_hook is hook
    assert layer._old_forward.__func__ is nn.Linear.forward
    assert torch.equal(layer(x), layer._old_forward(x + 1) * 2)
    remove_hook_from_module(layer)
    assert not hasattr(layer, "_hf_hook") and not hasattr(layer, "_old_forward")
    assert "forward" not in layer.__dict__
    assert torch.equal(layer(x), plain)
    assert hook.events == ["init", "detach"]


def test_append_makes_a_sequential_hook():
    layer = _linear()
    x = torch.randn(2, 3)
    add_hook_to_module(layer, AddOne())
    add_hook_to_module(layer, AddOne(), append=True)
    assert isinstance(layer._hf_hook, SequentialHook)
    out = layer(x)
    # pre_forwards run in order (x + 1 + 1), post_forwards in order (* 2 * 2)
    expected = nn.functional.linear(x + 2, layer.weight, layer.bias) * 4
    assert torch.allclose(out, expected)
    add_hook_to_module(layer, AddOne())  # replacing keeps the true original forward
    assert torch.allclose(layer(x), nn.functional.linear(x + 1, layer.weight, layer.bias) * 2)


def test_align_devices_hook_offloads_weights_between_calls():
    layer = _linear()
    x = torch.randn(2, 3)
    expected = layer(x)
    weights = {k: v.clone() for k, v in layer.state_dict().items()}
    add_hook_to_module(layer, AlignDevicesHook("cpu", offload=True, weights_map=weights))
    assert layer.weight.device.type == "meta"
    assert has_offloaded_params(layer)
    assert torch.equal(layer(x), expected)
    assert layer.weight.device.type == "meta"
    with align_module_device(layer):
        assert torch.equal(layer.weight, weights["weight"])
    assert layer.weight.device.type == "meta"
    remove_hook_from_module(layer)
    assert torch.equal(layer.weight, weights["weight"])


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_cpu_offload_and_disk_offload_match_the_plain_model(tmp_path):
    x = torch.randn(5, 4)
    model = _mlp()
    expected = model(x)
    assert torch.equal(cpu_offload(_mlp(), "cpu")(x), expected)
    offloaded = disk_offload(_mlp(), tmp_path, execution_device="cpu")
    assert offloaded[0].weight.device.type == "meta"
    assert torch.equal(offloaded(x), expected)
    assert sorted(p.name for p in tmp_path.glob("*.dat")) == [
        "0.bias.dat",
        "0.weight.dat",
        "2.bias.dat",
        "2.weight.dat",
    ]
    remove_hook_from_submodules(offloaded)
    assert all(not hasattr(m, "_hf_hook") for m in offloaded.children())


def test_preload_module_classes_loads_a_whole_block():
    model = _mlp()
    x = torch.randn(5, 4)
    expected = model(x)
    wrapped = nn.Sequential(model)
    attach_align_device_hook(
        wrapped,
        "cpu",
        offload=True,
        weights_map={f"0.{k}": v.clone() for k, v in model.state_dict().items()},
        preload_module_classes=["Sequential"],
    )
    assert wrapped._hf_hook.place_submodules
    assert not hasattr(model[0], "_hf_hook")
    assert torch.equal(wrapped(x), expected)


def test_execution_device_hook_on_every_module_with_weights():
    model = _mlp()
    attach_execution_device_hook(model, "cpu")
    assert isinstance(model._hf_hook, AlignDevicesHook)
    assert isinstance(model[0]._hf_hook, AlignDevicesHook)
    assert not hasattr(model[1], "_hf_hook")  # ReLU has no tensors


def test_cpu_offload_with_hook_chain_hands_the_device_on():
    first, second = _mlp(), nn.Linear(2, 2)
    x = torch.randn(3, 4)
    expected = second(first(x))
    first, hook1 = cpu_offload_with_hook(first, "cpu")
    offloads = []
    original = hook1.offload
    hook1.offload = lambda: (offloads.append(1), original())[1]
    second, hook2 = cpu_offload_with_hook(second, "cpu", prev_module_hook=hook1)
    assert torch.equal(second(first(x)), expected)
    assert offloads == [1]  # running the second model sent the first one back
    hook2.remove()
    assert not hasattr(second, "_hf_hook")
