"""Tensor, context and sequence parallelism: out of scope in accel (the names port, nothing runs).

The configuration classes are built with Accelerate 1.15's fields, defaults and variables, so
ported code and config files load. What would run them -- a size above 1 in
:class:`~accel_backends.parallelism_config.ParallelismConfig`, a plugin passed to ``Accelerator``
-- raises ``OutOfScopeError`` through :meth:`OutOfScopeParallelism.unsupported_error`.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from accel_core.out_of_scope import OutOfScopeError, out_of_scope

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

_INSTEAD = (
    "shard the model with data parallelism instead (dp_shard_size / the FSDP plugin), or "
    "run tensor/context parallel code with torch.distributed directly"
)


class OutOfScopeParallelism:
    """A parallelism accel does not run; ``Accelerator`` refuses it with the error below."""

    feature: ClassVar[str]

    def unsupported_error(self) -> OutOfScopeError:
        """The error for using this configuration."""
        return out_of_scope(f"{self.feature} ({type(self).__name__})", _INSTEAD)


@dataclass
class TorchTensorParallelPlugin(OutOfScopeParallelism):
    """Tensor parallelism with torch's DTensor (out of scope in accel)."""

    feature: ClassVar[str] = "Tensor parallelism"
    tp_size: int = 1
    torch_device_mesh: DeviceMesh | None = None


@dataclass
class TorchTensorParallelConfig(OutOfScopeParallelism):
    """Tensor-parallel options of ``ParallelismConfig`` (out of scope in accel)."""

    feature: ClassVar[str] = "Tensor parallelism"
    enable_async_tp: bool = False

    def __post_init__(self) -> None:
        if self.enable_async_tp:
            warnings.warn(
                "Async tensor parallelism is currently not supported, ignoring this option.",
                stacklevel=3,
            )


@dataclass
class TorchContextParallelConfig(OutOfScopeParallelism):
    """Context-parallel options of ``ParallelismConfig`` (out of scope in accel).

    ``cp_comm_strategy``: ``allgather`` (default, or ``PARALLELISM_CONFIG_CP_COMM_STRATEGY``) or
    ``alltoall``; anything else is a ``ValueError``.
    """

    feature: ClassVar[str] = "Context parallelism"
    cp_comm_strategy: str | None = None

    def __post_init__(self) -> None:
        if self.cp_comm_strategy is None:
            self.cp_comm_strategy = os.environ.get(
                "PARALLELISM_CONFIG_CP_COMM_STRATEGY", "allgather"
            )
        if self.cp_comm_strategy not in ("allgather", "alltoall"):
            raise ValueError(
                f"Invalid cp_comm_strategy: {self.cp_comm_strategy}. Must be one of 'allgather' "
                "or 'alltoall'."
            )


_BUILT_IN_ATTENTION = ("flash_attention_2", "flash_attention_3", "sdpa")


@dataclass
class DeepSpeedSequenceParallelConfig(OutOfScopeParallelism):
    """DeepSpeed (Ulysses/ALST) sequence-parallel options (out of scope in accel).

    Unset fields read ``PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE`` (default true),
    ``PARALLELISM_CONFIG_SP_SEQ_LENGTH`` and ``PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION``.
    """

    feature: ClassVar[str] = "DeepSpeed sequence parallelism"
    sp_seq_length: int | None = None
    sp_seq_length_is_variable: bool | None = None
    sp_attn_implementation: str | None = None

    def __post_init__(self) -> None:
        if self.sp_seq_length_is_variable is None:
            variable = os.environ.get("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "true")
            self.sp_seq_length_is_variable = variable.lower() == "true"
        if not self.sp_seq_length_is_variable and self.sp_seq_length is None:
            text = os.environ.get("PARALLELISM_CONFIG_SP_SEQ_LENGTH")
            if text is None:
                raise ValueError(
                    "when `sp_seq_length_is_variable` is `False` `sp_seq_length` must be "
                    "provided either through the constructor or the environment variable "
                    "PARALLELISM_CONFIG_SP_SEQ_LENGTH"
                )
            self.sp_seq_length = None if text == "None" else int(text)
        if self.sp_attn_implementation is None:
            self.sp_attn_implementation = os.environ.get(
                "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION"
            )
        attention = self.sp_attn_implementation
        if attention is None:
            return
        if attention in ("eager", "flex_attention"):
            raise ValueError(
                f"Invalid sp_attn_implementation: {attention}. 'eager' and 'flex_attention' are "
                "not supported with sequence parallelism."
            )
        if attention not in _BUILT_IN_ATTENTION and not (
            "/" in attention and "flash-attn" in attention
        ):
            raise ValueError(
                f"Invalid sp_attn_implementation: {attention}. Must be one of "
                f"{list(_BUILT_IN_ATTENTION)} or a hub-hosted flash attention kernel (e.g. "
                "'kernels-community/flash-attn2')."
            )
