"""Resolving ``Accelerator`` arguments: the value given, else the launch environment, else defaults.

Each function turns one group of constructor arguments into the object the Accelerator keeps, and
raises an error naming the value and the valid choices when it can't.
"""

from __future__ import annotations

import warnings
from typing import Any

from accel_core.configuration import DataLoaderConfiguration, TorchDynamoPlugin


def check_steps(steps: object) -> None:
    """Refuse accumulation steps that are not an integer >= 1."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(
            f"gradient_accumulation_steps={steps!r} is not valid: give an integer >= 1 "
            "(1 means no accumulation)."
        )


def accumulation_plugin(steps: int | None, plugin: Any, environment: Any) -> Any:
    """The accumulation plugin: the one given, else one with ``steps`` (default from the launch
    environment's ``ACCEL_GRADIENT_ACCUMULATION_STEPS``)."""
    from accel_core.gradient_state import GradientAccumulationPlugin

    if plugin is not None:
        if steps not in (None, 1):
            raise ValueError(
                f"gradient_accumulation_steps={steps} and gradient_accumulation_plugin were both "
                "given; set num_steps in the plugin only."
            )
        return plugin
    if steps is None:
        steps = environment.gradient_accumulation_steps
    check_steps(steps)
    return GradientAccumulationPlugin(num_steps=steps)


def dataloader_config(
    config: DataLoaderConfiguration | None, split_batches: bool | None
) -> DataLoaderConfiguration:
    """The data-loader configuration, with the deprecated ``split_batches=`` folded in."""
    config = config if config is not None else DataLoaderConfiguration()
    if split_batches is not None:
        warnings.warn(
            "Accelerator(split_batches=...) is deprecated; pass "
            "dataloader_config=DataLoaderConfiguration(split_batches=...) instead.",
            FutureWarning,
            stacklevel=3,
        )
        config.split_batches = bool(split_batches)
    return config


def dynamo_plugin(backend: Any, plugin: TorchDynamoPlugin | None) -> TorchDynamoPlugin:
    """The torch.compile settings: the plugin, else one with ``backend``, else one read from the
    environment (``ACCEL_DYNAMO_*``, else Accelerate's ``ACCELERATE_DYNAMO_*``); fields not given
    are read from the environment too, as in Accelerate."""
    if plugin is not None and backend is not None:
        raise ValueError(
            "dynamo_plugin and dynamo_backend were both given; pass one of them (the backend is "
            "TorchDynamoPlugin(backend=...))."
        )
    if plugin is not None:
        return plugin
    return TorchDynamoPlugin(backend=backend)
