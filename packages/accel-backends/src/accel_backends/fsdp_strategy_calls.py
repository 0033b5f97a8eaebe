"""FSDP calls that need the FSDP strategy of accel-backends, which is not built yet.

They keep Accelerate's signatures so that ported code imports and type-checks; each raises
``StrategyNotBuiltError`` naming itself. The FSDP strategy will implement them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import torch

from accel_backends.errors import strategy_not_built

if TYPE_CHECKING:
    from accel_backends.fsdp_plugin import FullyShardedDataParallelPlugin
    from accel_core import Accelerator


def save_fsdp_model(
    fsdp_plugin: FullyShardedDataParallelPlugin,
    accelerator: Accelerator,
    model: torch.nn.Module,
    output_dir: str | Path,
    model_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> NoReturn:
    """Save an FSDP model's weights (full, or sharded through torch.distributed.checkpoint)."""
    raise strategy_not_built("FSDP", "save_fsdp_model")


def load_fsdp_model(
    fsdp_plugin: FullyShardedDataParallelPlugin,
    accelerator: Accelerator,
    model: torch.nn.Module,
    input_dir: str | Path,
    model_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> NoReturn:
    """Load weights saved by :func:`save_fsdp_model` into an FSDP model."""
    raise strategy_not_built("FSDP", "load_fsdp_model")


def save_fsdp_optimizer(
    fsdp_plugin: FullyShardedDataParallelPlugin,
    accelerator: Accelerator,
    optimizer: torch.optim.Optimizer,
    model: torch.nn.Module,
    output_dir: str | Path,
    optimizer_index: int = 0,
    use_dcp: bool = True,
) -> NoReturn:
    """Save the state of an optimizer over an FSDP model."""
    raise strategy_not_built("FSDP", "save_fsdp_optimizer")


def load_fsdp_optimizer(
    fsdp_plugin: FullyShardedDataParallelPlugin,
    accelerator: Accelerator,
    optimizer: torch.optim.Optimizer,
    model: torch.nn.Module,
    input_dir: str | Path,
    optimizer_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> NoReturn:
    """Load an optimizer state saved by :func:`save_fsdp_optimizer`."""
    raise strategy_not_built("FSDP", "load_fsdp_optimizer")


def fsdp2_prepare_model(accelerator: Accelerator, model: torch.nn.Module) -> NoReturn:
    """Shard ``model`` with FSDP2 (``fully_shard``) as the Accelerator's plugin says."""
    raise strategy_not_built("FSDP", "fsdp2_prepare_model")


def fsdp2_load_full_state_dict(
    accelerator: Accelerator,
    model: torch.nn.Module,
    full_sd: dict[str, torch.Tensor],
    cpu_offload: bool = False,
) -> NoReturn:
    """Distribute a full state dict (on rank 0) into an FSDP2-sharded model."""
    raise strategy_not_built("FSDP", "fsdp2_load_full_state_dict")
