"""Exact equality of saved states, for the asynchronous-save tests: the files of an asynchronous
save against those of a synchronous one."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def assert_same(a: Any, b: Any, where: str = "", *, key_order: bool = False) -> None:
    """``a`` and ``b`` exactly equal: tensors bit for bit (dtype and shape too), arrays, dicts
    (their keys in the same order with ``key_order``), sequences, other objects by their
    attributes, the rest with ``==``. ``where`` names the place in the failure."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert (list(a) == list(b)) if key_order else (a.keys() == b.keys()), where
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}", key_order=key_order)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{index}]", key_order=key_order)
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        assert_same(vars(a), vars(b), where, key_order=key_order)
    else:
        assert a == b, where
