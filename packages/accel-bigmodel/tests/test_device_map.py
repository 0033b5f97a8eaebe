import pytest
import torch
from bigmodel_helpers import gpt2_config
from torch import nn

from accel_bigmodel import (
    check_device_map,
    find_tied_parameters,
    infer_auto_device_map,
    init_empty_weights,
)
from accel_bigmodel.device_map import resolve_device_map


class Block(nn.Module):
    """160 bytes: two Linear(4, 4)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.a(x)) + x


def _model() -> nn.Module:
    # 0: 80, 1: 80, 2: Block 160, 3: 80   -> 400 bytes
    with init_empty_weights():
        return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), Block(), nn.Linear(4, 4))


def test_fills_gpus_in_order_then_cpu():
    # Accelerate 1.15 gives this map: GPU 0 (and the CPU) always keep room for the biggest layer
    # (80 bytes), so only module 0 fits there; Block 2 is split over GPU 1 and the CPU.
    device_map = infer_auto_device_map(_model(), {0: 200, 1: 200, "cpu": 1000})
    assert device_map == {"0": 0, "1": 1, "2.a": 1, "2.b": "cpu", "3": "cpu"}
    assert all(isinstance(v, (int, str)) for v in device_map.values())


def test_offloading_reserves_the_biggest_layer_on_the_main_device():
    # the model (400) does not fit on GPU 0 (250): 80 bytes (largest leaf) stay free there
    assert infer_auto_device_map(_model(), {0: 250, "cpu": 1000}) == {
        "0": 0,
        "1": 0,
        "2": "cpu",
        "3": "cpu",
    }


def test_no_split_module_classes_is_respected():
    # without no_split, Block is split (its first half fits next to 0 and 1)
    split = infer_auto_device_map(_model(), {0: 250, "cpu": 1000}, clean_result=False)
    whole = infer_auto_device_map(
        _model(), {0: 330, "cpu": 1000}, no_split_module_classes=["Block"], clean_result=False
    )
    assert split == {"0": 0, "1": 0, "2.a": "cpu", "2.b": "cpu", "3": "cpu"}
    # 330 - 160 (biggest layer is now the whole Block) = 170: 0 and 1 fit, the Block does not
    assert whole == {"0": 0, "1": 0, "2": "cpu", "3": "cpu"}
    loose = infer_auto_device_map(_model(), {0: 400 + 40, "cpu": 1000}, clean_result=False)
    assert loose == {"0": 0, "1": 0, "2": 0, "3": 0}


def test_disk_is_the_last_resort():
    device_map = infer_auto_device_map(_model(), {"cpu": 250})
    assert device_map == {"0": "cpu", "1": "cpu", "2": "disk", "3": "disk"}


def test_too_small_main_device_gets_nothing(caplog):
    # As in Accelerate 1.15: a main device smaller than the biggest layer (the 160-byte Block)
    # receives no module; everything moves on, and the log says what the device would need.
    with caplog.at_level("INFO", logger="accel_bigmodel.auto_map"):
        device_map = infer_auto_device_map(
            _model(), {"cpu": 100}, no_split_module_classes=["Block"]
        )
    assert device_map == {"": "disk"}
    assert "  - cpu: 240 bytes required" in caplog.text  # module 0 (80) + the reserved Block (160)
    gpu_too_small = {0: 100, "cpu": 1000}
    assert infer_auto_device_map(_model(), gpu_too_small, no_split_module_classes=["Block"]) == {
        "": "cpu"
    }


def test_strategies_on_gpu_indices():
    # the maps Accelerate 1.15 gives for the same strategies and budgets
    memory = {0: 1000, 1: 1000, 2: 1000, "cpu": 1000}
    model = _model()
    assert resolve_device_map(model, "sequential", memory) == {"": 0}
    assert resolve_device_map(model, "balanced", {0: 1000, 1: 1000, "cpu": 1000}) == {
        "0": 0,
        "1": 0,
        "2": 1,
        "3": 1,
    }
    # balanced_low_0: GPU 0 only gets what GPUs 1 and 2 cannot hold (nothing), and GPU 1 is
    # capped at 200 + 1.25 * 160 (the Block) = 400 bytes: the whole model fits there
    low = resolve_device_map(model, "balanced_low_0", memory, no_split_module_classes=["Block"])
    assert low == {"": 1}
    with pytest.raises(ValueError, match=r"unknown device_map strategy 'fast'.*'sequential'"):
        resolve_device_map(model, "fast", memory)


@pytest.mark.slow  # the first test to import transformers
def test_tied_parameters_share_a_device():
    with init_empty_weights():
        from transformers import GPT2LMHeadModel

        model = GPT2LMHeadModel(gpt2_config(layers=4))
    assert find_tied_parameters(model) == [["lm_head.weight", "transformer.wte.weight"]]
    memory = {0: 100_000, 1: 100_000, "cpu": 10**6}
    device_map = infer_auto_device_map(model, memory, no_split_module_classes=["GPT2Block"])
    assert device_map["lm_head"] == device_map["transformer.wte"]
    # no GPT2Block is split
    for key in device_map:
        parts = key.split(".")
        assert not (len(parts) > 3 and parts[1] == "h"), key
    check_device_map(model, device_map)


def test_transformers_no_split_modules_with_small_budget():
    from bigmodel_helpers import llama_config
    from transformers import LlamaForCausalLM

    with init_empty_weights():
        model = LlamaForCausalLM(llama_config(layers=4))
    no_split = model._no_split_modules
    device_map = infer_auto_device_map(model, {"cpu": 60_000}, no_split_module_classes=no_split)
    assert "disk" in device_map.values() and "cpu" in device_map.values()
    for key in device_map:
        assert not key.startswith("model.layers.") or key.count(".") == 2, key


def test_check_device_map_errors():
    model = _model()
    with pytest.raises(ValueError, match=r"unknown device 'gpu0' for module '0'"):
        check_device_map(model, {"0": "gpu0", "1": 0, "2": 0, "3": 0})
    with pytest.raises(
        ValueError,
        match=r"^The device_map provided does not give any device for the following parameters: "
        r"3.weight, 3.bias \(2 tensors\)",
    ):
        check_device_map(model, {"0": 0, "1": 0, "2": 0})
    # a name that is no module warns, as in Accelerate: maps that worked there keep working
    with pytest.warns(
        UserWarning,
        match=r"^The following device_map keys do not match any submodules in the model: "
        r"'2.c' \(did you mean '2.[ab]'\?\)",
    ):
        check_device_map(model, {"": 0, "2.c": 0})
    check_device_map(model, {"": "cpu"})
    assert torch.device("meta") == model[0].weight.device


def test_a_map_with_a_name_that_is_no_module_loads_and_runs_as_in_accelerate(tmp_path):
    from safetensors.torch import save_file

    from accel_bigmodel import load_checkpoint_and_dispatch

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "m.safetensors"
    )
    with init_empty_weights():
        empty = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    device_map = {"0": "cpu", "1": "disk", "2": "disk"}  # "2" is no module: a warning
    with pytest.warns(UserWarning, match="do not match any submodules in the model: '2'"):
        loaded = load_checkpoint_and_dispatch(
            empty, str(tmp_path / "m.safetensors"), device_map, offload_folder=tmp_path / "off"
        )
    inputs = torch.randn(3, 4)
    assert torch.equal(loaded(inputs), model(inputs))
    assert loaded.hf_device_map == {"0": "cpu", "1": "disk"}


def test_a_device_that_gets_nothing_is_logged_with_accelerates_words(caplog):
    import logging

    model = _model()
    with caplog.at_level(logging.INFO, logger="accel_bigmodel"):
        device_map = infer_auto_device_map(model, {0: 50, "cpu": 10_000})
    assert set(device_map.values()) == {"cpu"}
    [record] = [r for r in caplog.records if "insufficient memory" in r.msg]
    assert record.msg.startswith(
        "Based on the current allocation process, no modules could be assigned to the following "
        "devices due to insufficient memory:\n  - 0: "
    )
    assert record.args in ((), None)
