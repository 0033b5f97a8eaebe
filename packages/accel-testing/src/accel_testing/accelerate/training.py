"""Accelerate's ``accelerate.test_utils.training``: a linear regression model and data set.

``RegressionDataset(a, b, length, seed)`` draws ``x`` from a standard normal and ``y = a * x + b``
plus noise of standard deviation 0.1, from numpy's generator seeded with ``seed``, the way
Accelerate's does (the same seed gives Accelerate's samples); items are ``{"x": ..., "y": ...}``
float32 scalars. ``RegressionModel(a, b)`` computes ``x * a + b`` with ``a`` and ``b`` parameters.
"""

from __future__ import annotations

from typing import Any

import torch


class RegressionDataset:
    """``length`` samples of ``y = a * x + b`` plus noise; reproducible with ``seed``."""

    def __init__(self, a: float = 2, b: float = 3, length: int = 64, seed: int | None = None):
        import numpy as np

        generator = np.random.default_rng(seed)
        self.length = length
        self.x = generator.normal(size=(length,)).astype(np.float32)
        noise = generator.normal(scale=0.1, size=(length,)).astype(np.float32)
        self.y = a * self.x + b + noise

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": self.x[index], "y": self.y[index]}


class RegressionModel(torch.nn.Module):
    """``x * a + b``, with ``a`` and ``b`` scalar parameters (float32). Prints the dtypes of the
    parameters and the input on its first forward, as Accelerate's does (its tests read it)."""

    def __init__(self, a: float = 0, b: float = 0, double_output: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(a).float())
        self.b = torch.nn.Parameter(torch.tensor(b).float())
        self.first_batch = True

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        if x is None:
            raise TypeError("RegressionModel.forward needs the input x")
        if self.first_batch:
            print(f"Model dtype: {self.a.dtype}, {self.b.dtype}. Input dtype: {x.dtype}")
            self.first_batch = False
        return x * self.a + self.b
