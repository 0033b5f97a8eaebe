"""The smaller ``accelerate.utils.modeling`` helpers; expected values are Accelerate 1.15's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel_bigmodel import (
    check_device_same,
    clean_device_map,
    compute_module_sizes,
    compute_module_total_buffer_size,
    cpu_offload,
    fallback_allocate,
    get_max_layer_size,
    get_module_leaves,
    get_module_size_with_ties,
    get_non_persistent_buffers,
    get_state_dict_from_offload,
    get_state_dict_offloaded_model,
    has_offloaded_params,
    is_peft_model,
)
from accel_bigmodel.placement_units import size_with_tied_units


class WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))
        self.register_buffer("tmp", torch.ones(2), persistent=False)


def _model(tied: bool = False) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(4, 4), WithBuffer(), nn.Sequential(nn.Linear(4, 2), WithBuffer())
    )
    if tied:
        model[2][1].a.weight = model[0].weight
    return model


def test_sizes_keys_leaves_and_buffers_match_accelerate():
    sizes = compute_module_sizes(_model(tied=True))
    # Accelerate's keys and order: each tensor after its parents, parameters before buffers, the
    # second name of a tied weight (2.1.a.weight) absent
    assert list(sizes) == [
        *("", "0", "0.weight", "0.bias", "1", "1.a", "1.a.weight", "1.a.bias", "1.b"),
        *("1.b.weight", "1.b.bias", "2", "2.0", "2.0.weight", "2.0.bias", "2.1", "2.1.a"),
        *("2.1.a.bias", "2.1.b", "2.1.b.weight", "2.1.b.bias", "1.scale", "1.tmp"),
        *("2.1.scale", "2.1.tmp"),
    ]
    assert (sizes[""], sizes["1"], sizes["2.1"], sizes["2.1.a"]) == (424, 184, 120, 16)
    assert get_module_leaves(sizes) == [
        *("0.weight", "0.bias", "1.a.weight", "1.a.bias", "1.b.weight", "1.b.bias"),
        *("2.0.weight", "2.0.bias", "2.1.a.bias", "2.1.b.weight", "2.1.b.bias"),
        *("1.scale", "1.tmp", "2.1.scale", "2.1.tmp"),
    ]
    assert sizes["no.such.module"] == 0  # a defaultdict, as in Accelerate
    assert get_module_leaves({"": 3, "a": 3, "a.x": 1, "a.y": 2, "b": 0}) == ["a.x", "a.y", "b"]
    model = _model()
    assert compute_module_total_buffer_size(model) == 48
    assert compute_module_total_buffer_size(model, dtype=torch.float16) == 24
    assert get_max_layer_size(list(model.named_children()), compute_module_sizes(model), []) == (
        80,
        ["0", "1.a", "1.b", "2.1.a", "2.1.b"],
    )


def test_get_non_persistent_buffers():
    model = _model()
    assert get_non_persistent_buffers(model[1]) == {"tmp"}
    assert get_non_persistent_buffers(model) == set()
    assert get_non_persistent_buffers(model, recurse=True) == {"tmp"}
    assert get_non_persistent_buffers(model, recurse=True, fqns=True) == {"1.tmp", "2.1.tmp"}


def test_get_module_size_with_ties():
    model = _model(tied=True)
    sizes = compute_module_sizes(model)
    rest = list(model.named_children())[1:]
    # module 0 (80 bytes) holds 0.weight, tied to 2.1.a.weight inside module 2 (160 bytes)
    assert get_module_size_with_ties(["2.1.a.weight"], 80, sizes, rest)[:2] == (240, ["2"])
    assert get_module_size_with_ties([], 80, sizes, rest) == (80, [], [])
    # two tied names inside one unit: the unit once, less both names' sizes (2.0.weight has 32
    # bytes here; Accelerate 1.15 adds module 2 once per name: 80 + 160 - 32 + 160 = 368)
    assert get_module_size_with_ties(["2.0.weight", "2.1.a.weight"], 80, sizes, rest)[:2] == (
        208,
        ["2"],
    )


def test_get_module_size_with_ties_takes_the_tied_tensor_off_each_unit_as_accelerate():
    # Accelerate 1.15's own case: 15 Linear(10, 10) sharing one weight, sized before the tie (each
    # 440 bytes with its 400-byte weight); Accelerate gives 1000, the sum of whole units 6600
    model = nn.Sequential(*[nn.Linear(10, 10) for _ in range(15)])
    sizes = compute_module_sizes(model)
    for layer in model[1:]:
        layer.weight = model[0].weight
    tied = [f"{i}.weight" for i in range(1, 15)]
    rest = list(model.named_children())[1:]
    size, names, units = get_module_size_with_ties(tied, sizes["0"], sizes, rest)
    assert (sizes["0"], sizes["0.weight"], size) == (440, 400, 1000)
    assert names == [str(i) for i in range(1, 15)] and units == list(model[1:])


def test_the_placement_counts_each_shared_tensor_once():
    model = nn.Sequential(*[nn.Linear(10, 10) for _ in range(15)])
    for layer in model[1:]:
        layer.weight = model[0].weight
    sizes = compute_module_sizes(model)  # the shared weight counted once, under 0.weight
    rest = list(model.named_children())[1:]
    tied = [f"{i}.weight" for i in range(1, 15)]
    assert size_with_tied_units(tied, sizes["0"], sizes, rest)[0] == 1000 == sizes[""]
    # placing layer 1 first brings layer 0 (which holds the counted weight) along: all of it
    others = [f"{i}.weight" for i in range(15) if i != 1]
    units = list(model.named_children())
    assert size_with_tied_units(others, sizes["1"], sizes, units[:1] + units[2:])[0] == 1000


@pytest.mark.parametrize(
    ("limit", "no_split", "found", "remaining"),
    [
        # Accelerate 1.15 gives the same found unit and the same remaining list, except that its
        # lists drop the buffers 1.scale and 1.tmp of the module it splits open
        (100, [], "1.a", ["1.b", "1.scale", "1.tmp", "2"]),
        (79, [], "2.0", ["1", "2.1"]),
        (40, [], "2.0", ["1", "2.1"]),
        (70, ["Linear"], "2.0", ["1", "2.1"]),
        (10, [], None, ["1", "2"]),
        (100, ["WithBuffer", "Sequential"], None, ["1", "2"]),
        (-5, [], None, ["1", "2"]),
    ],
)
def test_fallback_allocate(limit, no_split, found, remaining):
    model = _model()
    modules = list(model.named_children())[1:]
    name, unit, rest = fallback_allocate(modules, compute_module_sizes(model), limit, no_split)
    assert name == found and [n for n, _ in rest] == remaining
    assert unit is (model.get_submodule(found) if found else None)
    assert [n for n, _ in modules] == ["1", "2"]  # the list given is not changed


def test_fallback_allocate_with_a_tied_partner_already_searched():
    # 2.1.a.weight is tied to 0.weight, and module 0 has been tried (and is too big) when module
    # 2 is searched. Accelerate fails there with an IndexError; here the partner adds nothing,
    # and infer_auto_device_map weighs the tie again when it places the unit found.
    model = _model(tied=True)
    sizes = compute_module_sizes(model)
    modules = list(model.named_children())
    tied = [["0.weight", "2.1.a.weight"]]
    name, _, rest = fallback_allocate(modules, sizes, 20, [], tied)
    assert name == "2.1.a"  # 16 bytes: its bias (the weight is counted under 0.weight)
    assert [n for n, _ in rest] == ["0", "1", "2.0", "2.1.b", "2.1.scale", "2.1.tmp"]


def test_clean_device_map():
    # Accelerate 1.15's results (its key order differs: merged keys go last)
    device_map = {"0": 0, "1.a": 0, "1.b": 0, "2.0": 1, "2.1.a": 1, "2.1.b": "cpu"}
    assert clean_device_map(device_map) == {
        "0": 0,
        "1": 0,
        "2.0": 1,
        "2.1.a": 1,
        "2.1.b": "cpu",
    }
    assert clean_device_map({"a.x.0": 0, "a.x.1": 0, "a.y": 0, "b": 1}) == {"a": 0, "b": 1}
    assert clean_device_map({"a.x": 0}) == {"a.x": 0}  # one key under "a" stays as it is
    assert clean_device_map({"a": "cpu", "b": "cpu"}) == {"": "cpu"}


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ("cuda", "cuda:0", True),
        ("cuda:0", "cuda", True),
        ("cuda:1", "cuda", False),
        ("cpu", "cpu", True),
        ("cpu", "meta", False),
        ("meta", "meta", True),
        ("xpu:1", "xpu:1", True),
    ],
)
def test_check_device_same(first, second, same):
    assert check_device_same(torch.device(first), torch.device(second)) is same


def _model_with_root_parameter() -> nn.Module:
    model = _model()
    model.register_parameter("root_scale", nn.Parameter(torch.tensor([2.0])))
    return model


def test_state_dict_of_an_offloaded_model():
    model = _model_with_root_parameter()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    cpu_offload(model, execution_device="cpu")
    assert has_offloaded_params(model[1].a)
    assert model[1].a.weight.device.type == "meta"
    state = get_state_dict_offloaded_model(model)
    # the same keys in the same order (the root's own parameter too, which Accelerate drops)
    assert list(state) == list(expected)
    for key, value in expected.items():
        assert state[key].device.type == "cpu"
        assert torch.equal(state[key], value), key
    assert model[1].a.weight.device.type == "meta"  # offloaded again afterwards


def test_state_dict_of_a_model_not_offloaded_is_its_state_dict():
    model = _model_with_root_parameter()
    state = get_state_dict_offloaded_model(model)
    assert list(state) == list(model.state_dict())
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_get_state_dict_from_offload_fills_known_keys():
    model = _model()
    values = {k: v.clone() for k, v in model.state_dict().items()}
    cpu_offload(model, execution_device="cpu")
    wanted = {"1.a.weight": "placeholder", "1.a.bias": "placeholder"}
    result = get_state_dict_from_offload(model[1].a, "1.a.weight", wanted)
    assert result is wanted and set(result) == {"1.a.weight", "1.a.bias"}
    assert torch.equal(result["1.a.weight"], values["1.a.weight"])
    assert torch.equal(result["1.a.bias"], values["1.a.bias"])
    assert model[1].a.weight.device.type == "meta"
    # a tensor name without a dot: the module is the root (Accelerate cuts a character off)
    plain = nn.Linear(2, 2)
    filled = get_state_dict_from_offload(plain, "weight", {"weight": "x", "bias": "y"})
    assert filled["weight"] is not None and torch.equal(filled["weight"], plain.weight)


def test_is_peft_model_without_peft():
    # peft is not a dependency; a plain or wrapped model is not a PeftModel
    model = nn.Linear(2, 2)
    assert is_peft_model(model) is False
    assert is_peft_model(nn.DataParallel(model)) is False
