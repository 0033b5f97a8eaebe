"""The Accelerate-compat part of a strategy: the answers Hugging Face Accelerate's names ask of
the engine (``AcceleratorState.distributed_type``, ``Accelerator.multi_device``, ``is_fsdp2``,
the plugin in ``AcceleratorState.fsdp_plugin``...), kept apart from the training contract.

accel-core reads these answers by Accelerate's names and never asks which strategy runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accel_ops import DistributedType


@dataclass
class AccelerateCompat:
    """What a strategy answers to Accelerate's questions (defaults: a plain single process).

    The strategy fills it: ``distributed_type`` and ``multi_device`` in ``setup_environment``,
    the rest when it is created (the resolver records ``plugin``).
    """

    #: Accelerate's ``DistributedType`` of this strategy (``AcceleratorState.distributed_type``);
    #: None until ``setup_environment`` ran.
    distributed_type: DistributedType | None = None
    #: Whether processes run on several accelerator devices (not CPUs):
    #: Accelerate's ``Accelerator.multi_device``.
    multi_device: bool = False
    #: The Accelerate-style plugin object this strategy was created from (``DeepSpeedPlugin``,
    #: ``FullyShardedDataParallelPlugin``...), or None.
    plugin: object | None = None
    #: The ``AcceleratorState`` attribute Accelerate keeps that plugin in (``"fsdp_plugin"``,
    #: ``"deepspeed_plugins"``). When the launch chose the strategy and the Accelerator was given
    #: no plugin, the state shows the strategy's own there, as Accelerate's state does.
    plugin_slot: str | None = None
    #: The names of Accelerate's yes/no questions about the engine answered yes (``"is_fsdp2"``:
    #: ``AcceleratorState.is_fsdp2`` and ``Accelerator.is_fsdp2``, when the strategy was created
    #: from the plugin in its ``plugin_slot``); every other name answers no.
    flags: frozenset[str] = field(default_factory=frozenset)
    #: Whether every process holds the whole model (Accelerate's ``LocalSGD`` averages whole
    #: copies, and refuses a strategy that shards).
    replicates_model: bool = False


__all__ = ["AccelerateCompat"]
