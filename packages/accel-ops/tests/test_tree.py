"""Nested-structure helpers: walking, types kept, paths in errors, batches, devices, precision."""

import dataclasses
import pickle
from collections import OrderedDict, defaultdict, namedtuple

import pytest
import torch

from accel_ops import (
    TensorInformation,
    concatenate,
    convert_outputs_to_fp32,
    convert_to_fp32,
    drop_duplicated_tail,
    find_batch_size,
    find_device,
    get_data_structure,
    honor_type,
    ignorant_find_batch_size,
    initialize_tensors,
    is_namedtuple,
    is_torch_tensor,
    listify,
    recursively_apply,
    send_to_device,
    slice_tensors,
)

Point = namedtuple("Point", ["x", "y"])


@dataclasses.dataclass
class Batch:
    ids: torch.Tensor
    name: str = "b"


@dataclasses.dataclass(frozen=True)
class Frozen:
    values: list


def nested():
    return {
        "a": torch.tensor([1.0, 2.0]),
        "b": [torch.tensor([3]), (torch.tensor([4]), "keep")],
        "p": Point(torch.tensor([5]), torch.tensor([6])),
        "d": Batch(ids=torch.tensor([7, 8])),
    }


def test_recursively_apply_keeps_structure_and_types():
    out = recursively_apply(lambda t: t * 10, nested())
    assert torch.equal(out["a"], torch.tensor([10.0, 20.0]))
    assert isinstance(out["b"], list) and isinstance(out["b"][1], tuple)
    assert out["b"][0].item() == 30 and out["b"][1][0].item() == 40 and out["b"][1][1] == "keep"
    assert isinstance(out["p"], Point) and out["p"].y.item() == 60
    assert isinstance(out["d"], Batch) and out["d"].ids.tolist() == [70, 80]
    assert out["d"].name == "b"


def test_recursively_apply_passes_arguments():
    out = recursively_apply(lambda t, k, plus=0: t * k + plus, [torch.tensor(1)], 3, plus=1)
    assert out[0].item() == 4


def test_recursively_apply_mapping_types():
    ordered = recursively_apply(lambda t: t + 1, OrderedDict(z=torch.tensor(0), a=torch.tensor(1)))
    assert isinstance(ordered, OrderedDict) and list(ordered) == ["z", "a"]
    default = defaultdict(list, {"k": torch.tensor(1)})
    out = recursively_apply(lambda t: t + 1, default)
    assert isinstance(out, defaultdict) and out["k"].item() == 2 and out.default_factory is list


def test_recursively_apply_frozen_dataclass():
    out = recursively_apply(lambda t: t + 1, Frozen(values=[torch.tensor(1)]))
    assert isinstance(out, Frozen) and out.values[0].item() == 2


def test_error_on_other_type_names_type_and_path():
    data = {"batch": {"labels": [torch.tensor(1), torch.tensor(2), "oops"]}}
    with pytest.raises(
        TypeError,
        match=r"^Unsupported types \(<class 'str'>\) passed to `<lambda>`\. Only nested "
        r"list/tuple/dicts of objects that are valid for `is_torch_tensor` should be passed\. "
        r"The str is at data\['batch'\]\['labels'\]\[2\]",
    ):
        recursively_apply(lambda t: t, data, error_on_other_type=True)
    with pytest.raises(TypeError, match=r"at data\[0\]\.name"):
        recursively_apply(lambda t: t, [Batch(torch.tensor(1))], error_on_other_type=True)


def test_honor_type_and_is_namedtuple():
    assert honor_type((1, 2), (x * 2 for x in (1, 2))) == (2, 4)
    assert honor_type(Point(1, 2), iter([3, 4])) == Point(3, 4)
    assert is_namedtuple(Point(1, 2)) and not is_namedtuple((1, 2))
    assert is_torch_tensor(torch.zeros(1)) and not is_torch_tensor([0])


def test_data_structure_round_trip():
    data = {"x": torch.zeros(2, 3, dtype=torch.int32), "y": [torch.ones(4)]}
    structure = get_data_structure(data)
    assert structure["x"] == TensorInformation(shape=torch.Size([2, 3]), dtype=torch.int32)
    made = initialize_tensors(structure)
    assert made["x"].shape == (2, 3) and made["x"].dtype == torch.int32
    assert made["y"][0].shape == (4,)

    @dataclasses.dataclass
    class OtherInfo:  # e.g. accel-bigmodel's own TensorInformation
        shape: torch.Size
        dtype: torch.dtype

    other = initialize_tensors([OtherInfo(torch.Size([3]), torch.float16)])
    assert other[0].shape == (3,) and other[0].dtype == torch.float16


def test_listify():
    data = {"a": torch.tensor([[1, 2]]), "b": torch.tensor(1.5, dtype=torch.bfloat16)}
    assert listify(data) == {"a": [[1, 2]], "b": 1.5}


def test_find_batch_size():
    assert find_batch_size({"a": [torch.zeros(5, 2)], "b": torch.zeros(3)}) == 5
    with pytest.raises(ValueError, match="empty list"):
        find_batch_size([])
    with pytest.raises(TypeError, match="got a str"):
        find_batch_size(["x"])
    assert ignorant_find_batch_size(["x"]) is None
    assert ignorant_find_batch_size((torch.zeros(2),)) == 2


def test_slice_tensors():
    out = slice_tensors({"a": torch.arange(6), "b": [torch.arange(4)]}, slice(1, 3))
    assert out["a"].tolist() == [1, 2] and out["b"][0].tolist() == [1, 2]


def test_concatenate():
    parts = [
        {"a": torch.tensor([1]), "b": (torch.tensor([[1, 1]]),)},
        {"a": torch.tensor([2]), "b": (torch.tensor([[2, 2]]),)},
    ]
    out = concatenate(parts)
    assert out["a"].tolist() == [1, 2] and out["b"][0].tolist() == [[1, 1], [2, 2]]
    assert concatenate([torch.ones(1, 2), torch.zeros(1, 2)], dim=1).shape == (1, 4)
    with pytest.raises(TypeError, match="got a str"):
        concatenate(["a", "b"])
    with pytest.raises(ValueError, match="non-empty list"):
        concatenate([])


def test_drop_duplicated_tail():
    gathered = {"preds": torch.arange(8), "extra": [torch.arange(16).reshape(8, 2)]}
    out = drop_duplicated_tail(gathered, 5)
    assert out["preds"].tolist() == [0, 1, 2, 3, 4]
    assert out["extra"][0].shape == (5, 2)
    assert drop_duplicated_tail(gathered, 0) is gathered
    assert drop_duplicated_tail(gathered, -1) is gathered
    assert drop_duplicated_tail(gathered, None) is gathered
    assert drop_duplicated_tail(["a", "b", "c", "a"], 3) == ["a", "b", "c"]
    assert drop_duplicated_tail(torch.tensor(3.0), 2).item() == 3.0
    assert drop_duplicated_tail(torch.arange(2), 5).tolist() == [0, 1]


def test_send_to_device():
    class Movable:
        def __init__(self):
            self.moved_to = None

        def to(self, device):  # no non_blocking: the fallback is used
            self.moved_to = device
            return self

    data = {
        "a": torch.ones(1),
        "skip": torch.ones(1, dtype=torch.float64),
        "b": (torch.zeros(1), Movable()),
        "s": "text",
    }
    out = send_to_device(data, "meta", skip_keys="skip")
    assert out["a"].device.type == "meta" and out["b"][0].device.type == "meta"
    assert out["skip"].device.type == "cpu" and out["s"] == "text"
    assert out["b"][1].moved_to == "meta"
    moved = send_to_device(Batch(ids=torch.ones(2)), "meta")
    assert isinstance(moved, Batch) and moved.ids.device.type == "meta"
    assert send_to_device(Point(torch.ones(1), 2), "meta").x.device.type == "meta"


def test_find_device():
    assert find_device({"x": "a", "y": [torch.ones(1, device="meta")]}) == torch.device("meta")
    assert find_device(["nothing"]) is None


def test_convert_to_fp32():
    data = {"h": torch.ones(2, dtype=torch.float16), "b": torch.ones(1, dtype=torch.bfloat16)}
    data["i"] = torch.ones(1, dtype=torch.int64)
    out = convert_to_fp32(data)
    assert out["h"].dtype == torch.float32 and out["b"].dtype == torch.float32
    assert out["i"].dtype == torch.int64


def test_convert_outputs_to_fp32():
    def forward(x):
        return {"logits": x.half()}

    wrapped = convert_outputs_to_fp32(forward)
    assert wrapped(torch.ones(2))["logits"].dtype == torch.float32
    assert wrapped.__wrapped__.model_forward is forward
    with pytest.raises(pickle.PicklingError, match="unwrap_model"):
        pickle.dumps(wrapped.__wrapped__)
