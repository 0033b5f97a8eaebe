"""What a hook answers accel-core's ``save_model`` (``accel_core.offloaded_weights``): whether it
offloads its module's weights, and the whole model's weights read back."""

from __future__ import annotations

import torch
from torch import nn

from accel_bigmodel import (
    AlignDevicesHook,
    ModelHook,
    SequentialHook,
    add_hook_to_module,
    cpu_offload,
    get_state_dict_offloaded_model,
    has_offloaded_params,
)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def test_a_hook_offloads_weights_exactly_when_its_module_has_offloaded_params():
    hooks = {
        "plain": ModelHook(),
        "aligning": AlignDevicesHook(execution_device="cpu"),
        "offloading": AlignDevicesHook(execution_device="cpu", offload=True),
        "sequence without offload": SequentialHook(ModelHook(), AlignDevicesHook("cpu")),
        "nested sequence with offload": SequentialHook(
            ModelHook(), SequentialHook(AlignDevicesHook("cpu", offload=True))
        ),
    }
    answers = {}
    for name, hook in hooks.items():
        layer = nn.Linear(2, 2)
        add_hook_to_module(layer, hook)
        answers[name] = (hook.offloads_weights(), has_offloaded_params(layer))
    assert answers == {
        "plain": (False, False),
        "aligning": (False, False),
        "offloading": (True, True),
        "sequence without offload": (False, False),
        "nested sequence with offload": (True, True),
    }


def test_the_hook_reads_the_whole_offloaded_model():
    model = _model()
    expected = {key: value.clone() for key, value in model.state_dict().items()}
    cpu_offload(model, execution_device="cpu")
    hook = model[2]._hf_hook
    assert hook.offloads_weights() and model[2].weight.is_meta
    state = hook.offloaded_model_state_dict(model)
    assert list(state) == list(expected)
    assert all(torch.equal(state[key], value) for key, value in expected.items())
    assert state.keys() == get_state_dict_offloaded_model(model).keys()
    assert model[2].weight.is_meta  # offloaded again afterwards
