"""How split_between_processes shares inputs, for any process count (checked without processes)."""

import pytest
import torch

from accel_ops.splitting import shard_bounds, split_inputs


def shares(inputs, n, padding=False):
    return [split_inputs(inputs, n, rank, padding) for rank in range(n)]


def test_shard_bounds_give_first_processes_the_extra_items():
    assert [shard_bounds(7, 3, r) for r in range(3)] == [(0, 3, 3), (3, 5, 3), (5, 7, 3)]
    assert [shard_bounds(4, 2, r)[:2] for r in range(2)] == [(0, 2), (2, 4)]


def test_lists_without_and_with_padding():
    assert shares(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert shares(list(range(7)), 3, True) == [[0, 1, 2], [3, 4, 6], [5, 6, 6]]
    assert shares(["A", "B", "C"], 2, True) == [["A", "B"], ["C", "C"]]


def test_fewer_inputs_than_processes():
    assert shares(["A"], 3) == [["A"], [], []]
    assert shares(["A"], 3, True) == [["A"], ["A"], ["A"]]
    assert shares([], 2, True) == [[], []]


def test_tuples_and_tensors():
    assert shares((1, 2, 3), 2, True) == [(1, 2), (3, 3)]
    parts = shares(torch.arange(10).reshape(5, 2), 2, True)
    assert parts[0].tolist() == [[0, 1], [2, 3], [4, 5]]
    assert parts[1].tolist() == [[6, 7], [8, 9], [8, 9]]


def test_dicts_split_each_value_and_leave_the_input_alone():
    data = {"text": ["a", "b", "c"], "ids": torch.tensor([1, 2, 3])}
    parts = shares(data, 2, True)
    assert parts[1]["text"] == ["c", "c"] and parts[1]["ids"].tolist() == [3, 3]
    assert data["text"] == ["a", "b", "c"]


def test_dict_values_must_have_equal_length():
    with pytest.raises(ValueError, match=r"same length, got lengths \{'a': 2, 'b': 1\}"):
        split_inputs({"a": [1, 2], "b": [1]}, 2, 0, False)


def test_unsupported_type():
    with pytest.raises(TypeError, match="can't split a set"):
        split_inputs({1, 2}, 2, 0, False)
    with pytest.raises(TypeError, match="can't split the dict value 'n', a int"):
        split_inputs({"a": [1, 2], "n": 3}, 2, 0, False)


def test_dataset_like_objects_use_select():
    class Dataset:
        def __init__(self, rows):
            self.rows = rows

        def __len__(self):
            return len(self.rows)

        def select(self, indices):
            return [self.rows[i] for i in indices]

    assert shares(Dataset(["a", "b", "c"]), 2, True) == [["a", "b"], ["c", "c"]]
