"""FP8 training recipes (Transformer Engine, MS-AMP, torchao): out of scope in accel.

The kwargs handlers keep Hugging Face Accelerate 1.15's fields, defaults and checks, including the
``ACCELERATE_FP8_*`` environment variables that fill unset fields, so configuration code ports
unchanged. Unlike Accelerate they can be built without the FP8 engine installed; passing one to
``Accelerator(kwargs_handlers=[...])`` raises :class:`~accel_core.out_of_scope.OutOfScopeError`.
"""

from __future__ import annotations

import enum
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from accel_core.out_of_scope import OutOfScopeKwargsHandler, is_importable
from accel_ops import parse_flag_from_env

Backend = Literal["MSAMP", "TE"]
OptLevel = Literal["O1", "O2"]
FP8Format = Literal["HYBRID", "E4M3", "E5M2"]
AmaxComputeAlgorithm = Literal["max", "most_recent"]

_ENV = "ACCELERATE_FP8_"
_INSTEAD = 'train in mixed_precision="bf16" or "fp16"'


class FP8BackendType(str, enum.Enum):
    """The engine behind FP8 training in Accelerate (none of them runs in accel)."""

    NO = "NO"
    TE = "TE"
    MSAMP = "MSAMP"
    AO = "AO"


def _choice(value: str, allowed: tuple[str, ...], field: str) -> str:
    if value not in allowed:
        raise ValueError(f"{field}={value!r} is not valid; choose one of {', '.join(allowed)}.")
    return value


@dataclass
class AORecipeKwargs(OutOfScopeKwargsHandler):
    """torchao FP8 recipe: ``config`` (a ``Float8LinearConfig``), ``module_filter_func``.

    Without ``config``, ``pad_inner_dim`` and ``enable_fsdp_float8_all_gather`` default to
    ``ACCELERATE_FP8_PAD_INNER_DIM`` / ``ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER`` (True).
    """

    feature = "FP8 training with torchao"
    instead = _INSTEAD

    config: object | None = None
    module_filter_func: Callable[[object, str], bool] | None = None
    pad_inner_dim: bool | None = None
    enable_fsdp_float8_all_gather: bool | None = None

    def __post_init__(self) -> None:
        if self.config is None:
            if self.pad_inner_dim is None:
                self.pad_inner_dim = parse_flag_from_env(_ENV + "PAD_INNER_DIM", default=True)
            if self.enable_fsdp_float8_all_gather is None:
                self.enable_fsdp_float8_all_gather = parse_flag_from_env(
                    _ENV + "ENABLE_FSDP_FLOAT8_ALL_GATHER", default=True
                )


@dataclass
class TERecipeKwargs(OutOfScopeKwargsHandler):
    """Transformer Engine FP8 recipe; unset fields come from ``ACCELERATE_FP8_*``.

    Defaults: ``use_autocast_during_eval=False``, ``margin=0``, ``interval=1``,
    ``fp8_format="HYBRID"`` (or ``E4M3``, ``E5M2``), ``amax_history_len=1024``,
    ``amax_compute_algo="most_recent"`` (or ``max``), ``override_linear_precision=(False, False,
    False)`` (fprop, dgrad, wgrad), ``use_mxfp8_block_scaling=False``.
    """

    feature = "FP8 training with Transformer Engine"
    instead = _INSTEAD

    use_autocast_during_eval: bool | None = None
    margin: int | None = None
    interval: int | None = None
    fp8_format: FP8Format | None = None
    amax_history_len: int | None = None
    amax_compute_algo: AmaxComputeAlgorithm | None = None
    override_linear_precision: tuple[bool, bool, bool] | None = None
    use_mxfp8_block_scaling: bool | None = None

    def __post_init__(self) -> None:
        if self.use_autocast_during_eval is None:
            self.use_autocast_during_eval = parse_flag_from_env(_ENV + "USE_AUTOCAST_DURING_EVAL")
        if self.margin is None:
            self.margin = int(os.environ.get(_ENV + "MARGIN", 0))
        if self.interval is None:
            self.interval = int(os.environ.get(_ENV + "INTERVAL", 1))
        fp8_format = self.fp8_format or os.environ.get(_ENV + "FORMAT", "HYBRID")
        self.fp8_format = _choice(fp8_format.upper(), get_args(FP8Format), "fp8_format")  # type: ignore[assignment]
        algorithm = self.amax_compute_algo or os.environ.get(
            _ENV + "AMAX_COMPUTE_ALGO", "most_recent"
        )
        self.amax_compute_algo = _choice(  # type: ignore[assignment]
            algorithm.lower(), get_args(AmaxComputeAlgorithm), "amax_compute_algo"
        )
        if self.amax_history_len is None:
            self.amax_history_len = int(os.environ.get(_ENV + "AMAX_HISTORY_LEN", 1024))
        if self.override_linear_precision is None:
            self.override_linear_precision = (
                parse_flag_from_env(_ENV + "OVERRIDE_FPROP"),
                parse_flag_from_env(_ENV + "OVERRIDE_DGRAD"),
                parse_flag_from_env(_ENV + "OVERRIDE_WGRAD"),
            )
        if self.use_mxfp8_block_scaling is None:
            self.use_mxfp8_block_scaling = parse_flag_from_env(_ENV + "USE_MXFP8_BLOCK_SCALING")


@dataclass
class MSAMPRecipeKwargs(OutOfScopeKwargsHandler):
    """MS-AMP FP8 recipe: ``opt_level`` ``"O1"`` or ``"O2"`` (``ACCELERATE_FP8_OPT_LEVEL``, O2)."""

    feature = "FP8 training with MS-AMP"
    instead = _INSTEAD

    opt_level: OptLevel | None = None

    def __post_init__(self) -> None:
        level = self.opt_level or os.environ.get(_ENV + "OPT_LEVEL", "O2")
        self.opt_level = _choice(level, get_args(OptLevel), "opt_level")  # type: ignore[assignment]


@dataclass
class FP8RecipeKwargs(TERecipeKwargs, MSAMPRecipeKwargs):
    """Deprecated in Accelerate (a FutureWarning): ``backend`` ``"TE"`` or ``"MSAMP"``.

    As in Accelerate, the Transformer Engine fields are filled in and ``opt_level`` is left as
    given; ``backend`` defaults to ``ACCELERATE_FP8_BACKEND``, else MSAMP when ``msamp`` is
    installed, else TE.
    """

    feature = "FP8 training"

    backend: Backend | None = None

    def __post_init__(self) -> None:
        warnings.warn(
            "FP8RecipeKwargs is deprecated (in Accelerate too); use TERecipeKwargs or "
            "MSAMPRecipeKwargs. FP8 training is out of scope in accel.",
            FutureWarning,
            stacklevel=3,
        )
        default = "msamp" if is_importable("msamp") else "te"
        backend = self.backend or os.environ.get(_ENV + "BACKEND", default)
        self.backend = _choice(backend.upper(), get_args(Backend), "backend")  # type: ignore[assignment]
        TERecipeKwargs.__post_init__(self)
