"""Collectives on one process (with and without a PartialState): nothing to communicate."""

import pytest
import torch

from accel_ops import (
    CannotPadNestedTensorWarning,
    PartialState,
    broadcast,
    broadcast_object_list,
    copy_tensor_to_devices,
    gather,
    gather_object,
    pad_across_processes,
    pad_input_tensors,
    reduce,
    wait_for_everyone,
)


@pytest.fixture(params=["no state", "state"])
def maybe_state(request):
    if request.param == "state":
        PartialState()


@pytest.mark.usefixtures("maybe_state")
def test_one_process_results():
    x = torch.arange(6.0).reshape(3, 2)
    nested = {"x": x, "y": [torch.tensor(1)]}
    assert gather(x) is x
    out = gather(nested)
    assert out["x"] is x and out["y"][0].ndim == 0
    assert gather_object([1, 2]) == [1, 2]
    assert gather_object({"a": 1}) == [{"a": 1}]
    assert broadcast(x) is x
    objects = [1, "a"]
    assert broadcast_object_list(objects) is objects and objects == [1, "a"]
    for reduction in ("sum", "mean", "max", "none"):
        result = reduce(x, reduction)
        assert torch.equal(result, x) and result is not x
    assert torch.equal(reduce(x, "sum", scale=0.5), x * 0.5)
    assert pad_across_processes(nested) is nested
    assert torch.equal(copy_tensor_to_devices(x), x)
    wait_for_everyone()


def test_reduce_rejects_unknown_reduction():
    with pytest.raises(ValueError, match=r"reduce\(reduction='avg'\) is not one of mean, sum"):
        reduce(torch.ones(1), "avg")


@pytest.mark.parametrize(
    ("call", "op"),
    [
        (lambda d: reduce(d), "reduce"),
        (lambda d: pad_across_processes(d), "pad_across_processes"),
    ],
)
def test_non_tensor_is_a_type_error_with_path(call, op):
    data = {"batch": {"labels": [torch.ones(1), torch.ones(1), "oops"]}}
    with pytest.raises(TypeError) as info:
        call(data)
    message = str(info.value)
    assert message.startswith(f"{op} expects tensors")
    assert "found str at tensor['batch']['labels'][2]" in message


def test_gather_and_broadcast_return_any_input_on_one_process():
    data = {"labels": [torch.ones(1), "text"]}
    assert gather(data) is data
    assert broadcast(data) is data


def test_copy_tensor_to_devices_needs_a_tensor_on_one_process():
    with pytest.raises(ValueError, match="got None on the only process"):
        copy_tensor_to_devices(None)


def test_pad_input_tensors_rounds_up_to_a_multiple():
    assert pad_input_tensors(torch.ones(3, 4, 4), 3, 4).shape == (4, 4, 4)
    out = pad_input_tensors({"a": torch.ones(5, 2), "b": [torch.ones(5)]}, 5, 4)
    assert out["a"].shape == (8, 2) and out["b"][0].shape == (8,)
    assert out["a"][5:].abs().sum() == 0 and out["a"][:5].sum() == 10
    assert pad_input_tensors(torch.ones(8), 8, 4).shape == (8,)
    assert pad_input_tensors(torch.ones(2, 3), 3, 2, dim=1).shape == (2, 4)
    with pytest.raises(ValueError, match="num_processes=0"):
        pad_input_tensors(torch.ones(1), 1, 0)


def test_nested_tensors_are_left_unpadded_with_a_warning():
    import warnings

    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = pad_across_processes({"n": nested})
    assert out["n"] is nested
    assert any(issubclass(w.category, CannotPadNestedTensorWarning) for w in caught)
